"""judge subpackage of solm."""
