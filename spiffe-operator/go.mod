module github.com/trustplane/trustplane/spiffe-operator

go 1.26

require github.com/trustplane/trustplane/common v0.0.0

replace github.com/trustplane/trustplane/common => ../common
