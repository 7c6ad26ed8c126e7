package identitybinding

// RecordsHeld is how many bindings h remembers a refusal or a run of
// Forbidden answers of.
func RecordsHeld(h *Handler) int { return h.forbidden.held() + h.refusals.held() }
