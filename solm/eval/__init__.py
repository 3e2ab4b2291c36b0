"""eval subpackage of solm."""
