"""Limits on clients: byte-rate quotas on Produce and Fetch and the connection mute they
cause (`quota`), open connections per client address (`connections`)."""
