"""train subpackage of solm."""
