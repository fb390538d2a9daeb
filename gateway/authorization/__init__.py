"""ACL enforcement: the authorizer's guard around every API's handler (`guard`)."""
