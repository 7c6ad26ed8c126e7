// Package controller runs the whole reconcile lifecycle around a
// handler.Handler, in the order of Controller.Reconcile:
//
//  1. fetch the object (gone: nothing to do);
//  2. deletion: call Handler.Delete and remove the finalizer once it
//     succeeds. This runs before the environment check, so an object whose
//     environment label is missing or removed can always be deleted;
//  3. environment check: without the trustplane.dev/environment label (and no
//     default environment configured) the object is Blocked and the handler
//     is not called; adding the label triggers a reconcile at once;
//  4. add the finalizer (a conflict-safe patch);
//  5. put a janitor.Client scoped to the environment into the context and
//     call Handler.CreateOrUpdate;
//  6. map the handler's error to the Processing and Ready conditions and a
//     requeue; stamp ObservedGeneration;
//  7. patch the status only when it changed, guarded by the resourceVersion
//     that was read; on a conflict the pass runs again on a fresh read, and a
//     handler error is kept when the write fails too. A status the handler
//     marked with StatusMayWait is held back, for a pass an event starts
//     within StatusWaitDelay to write instead, and for at most
//     Options.StatusMaxWait while events keep coming;
//  8. emit events on transitions only (Ready flips, Blocked) and record metrics.
package controller
