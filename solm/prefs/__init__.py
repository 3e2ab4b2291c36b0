"""Preference data for PASTA: samples, scores, best-against-worst pairs (`pasta prefs`)."""
