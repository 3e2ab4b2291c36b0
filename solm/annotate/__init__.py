"""annotate subpackage of solm."""
