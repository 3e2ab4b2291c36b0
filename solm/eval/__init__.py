"""Measuring: PASTA's replay benchmark and format statistics, TIP's policy benchmark, their
plots and aggregates."""
