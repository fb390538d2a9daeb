"""Request guards in front of the handlers: ACL checks (`guard`), client quotas and the
connection mute they cause (`quota`), the per-address connection limit (`connections`)."""
