"""ACL enforcement: every API's authorization rule as a row of a table (`rules`), and the
guard that applies the rules around the handlers, with the few APIs whose checks a row
cannot say (`guard`)."""
