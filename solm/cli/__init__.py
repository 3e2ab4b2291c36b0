"""typer apps: flags in, one call, rich output."""

import os as _os

# transformers' log warnings ("Token indices sequence length is longer than ...") are not for
# the CLI's users: solm says what matters in its own words. Set before any command module
# imports transformers, which reads it once; SOLM_DEBUG=1 (or the variable set) shows them.
if not _os.environ.get("SOLM_DEBUG"):
    _os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
