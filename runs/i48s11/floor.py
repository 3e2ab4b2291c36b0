"""Issue 48, eleventh session: what bench/pasta_vs_llamacpp.py's run says about the floor.
From its output (with each pass's width and milliseconds):
- the pooled ratio measured, and the same from the median pass of each width inside the
  decode (a check that those medians account for the time);
- the pass costs inside the decode against the own loop's token;
- the content tokens a pass must carry for 1.2x at the measured costs;
- the ratio the same schedule would reach on the step the acceptance asks for (one token at
  `--one` x the own loop's token, up to 1.2; k tokens at 1 + 0.5 (k - 1) / 3 times one token,
  i.e. k = 4 at 1.5x, linear past it).

    python runs/i48s11/floor.py VS_LLAMACPP.json"""
import json
import sys

vs = json.load(open(sys.argv[1]))
rows = vs["rows"]
widths = [w for r in rows for w in r["pasta_pass_widths"]]
by = {int(k): v for k, v in vs["pasta_pass_ms_by_width"].items()}
own = vs["baseline_ms_per_token"]
content = vs["pasta_content_tokens"]
pooled = vs["pasta_tokens_per_s_pooled"] / vs["baseline_tokens_per_s_pooled"]
from_medians = (content / sum(by[w] for w in widths)) * own
print(f"{vs['pasta']['model']} on {vs['pasta']['engine']} {vs['pasta']['format']}, {vs['cpu']}")
print(f"measured: geomean {vs['ratio_geomean']:.3f}x, pooled {pooled:.3f}x; from the median "
      f"pass of each width: {from_medians:.3f}x")
print(f"own loop: {own:.2f} ms a token; {len(widths)} passes, {content} content tokens "
      f"({content / len(widths):.2f} a pass)")
hist = vs["pasta_width_histogram"]
for w, ms in by.items():
    print(f"  width {w}: {hist[str(w)]:5d} passes, median {ms:5.2f} ms = {ms / by[1]:.2f}x a "
          f"width-1 pass = {ms / own:.2f}x the own loop's token")
mean_pass = sum(by[w] for w in widths) / len(widths)
print(f"mean pass {mean_pass:.2f} ms = {mean_pass / own:.2f}x the own loop's token: 1.2x "
      f"needs {1.2 * mean_pass / own:.2f} content tokens a pass at these costs")
for one in (1.0, 1.2):
    target = sum(one * own * (1 + 0.5 * (w - 1) / 3) for w in widths)
    print(f"on the acceptance's step (one token {one:.1f}x the own loop's, k = 4 at 1.5x one): "
          f"{content * own / target:.2f}x")
