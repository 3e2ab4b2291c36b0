"""typer apps: flags in, one call, rich output."""
