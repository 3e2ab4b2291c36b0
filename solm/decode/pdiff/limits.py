"""Ranges of Planned Diffusion's decode knobs, light enough for the CLI to import."""

# chunk slots = round(10 N x scale): beyond these a promise's slots bear no relation to the
# N the model wrote (at 1e6 no promise fits any answer and the plan degenerates)
MIN_LENGTH_SCALE, MAX_LENGTH_SCALE = 0.1, 8.0
