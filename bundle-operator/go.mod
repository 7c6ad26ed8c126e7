module github.com/trustplane/trustplane/bundle-operator

go 1.26

require github.com/trustplane/trustplane/common v0.0.0

replace github.com/trustplane/trustplane/common => ../common
