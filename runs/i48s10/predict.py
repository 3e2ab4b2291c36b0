"""What a PASTA schedule costs on a measured pass cost curve, against one-token passes.

    python runs/i48s10/predict.py VS_LLAMACPP.json KERNELS.json [format] [repack] [flash]

VS_LLAMACPP.json: bench/pasta_vs_llamacpp.py's output (with pass widths); KERNELS.json:
runs/i48s10/llama_kernels.py's (ms per pass at k = 1, 2, 3, 4, 6, 8; linear between, and past 8
along the last segment). Prints the measured ratio, the ratio the schedule alone predicts
(every pass at the curve's cost, the baseline at k = 1), and per width the content tokens a
pass of that width must carry for 1.2x."""
import json
import sys


def curve(kernels: dict, fmt: str, repack: bool, flash: bool):
    row = next(r for r in kernels["rows"] if r["format"] == fmt and r["repack"] == repack
               and r["flash"] == flash)
    pts = sorted((int(k), v) for k, v in row["ms"].items())

    def cost(k: int) -> float:
        for (k0, v0), (k1, v1) in zip(pts, pts[1:]):
            if k <= k1:
                return v0 + (v1 - v0) * (k - k0) / (k1 - k0)
        (k0, v0), (k1, v1) = pts[-2], pts[-1]
        return v1 + (v1 - v0) * (k - k1) / (k1 - k0)
    return cost


def main() -> None:
    vs = json.load(open(sys.argv[1]))
    kernels = json.load(open(sys.argv[2]))
    fmt = sys.argv[3] if len(sys.argv) > 3 else "q4_0"
    repack = (sys.argv[4] if len(sys.argv) > 4 else "1") == "1"
    flash = (sys.argv[5] if len(sys.argv) > 5 else "1") == "1"
    cost = curve(kernels, fmt, repack, flash)
    widths = [w for r in vs["rows"] for w in r["pasta_pass_widths"]]
    content = vs["pasta_content_tokens"]
    fed = sum(widths)
    predicted = content * cost(1) / sum(cost(w) for w in widths)
    print(f"{vs['pasta']['model']}: {len(widths)} passes, {fed} tokens fed "
          f"({fed / len(widths):.2f} a pass), {content} content ({content / len(widths):.2f} "
          f"a pass, {content / fed:.0%} of fed)")
    print(f"measured ratio {vs['ratio_geomean']:.2f}x (pooled "
          f"{vs['pasta_tokens_per_s_pooled'] / vs['baseline_tokens_per_s_pooled']:.2f}x); "
          f"the schedule on {fmt} repack={repack} flash={flash}, passes at the curve's cost "
          f"against one-token passes: {predicted:.2f}x")
    hist = vs.get("pasta_width_histogram") or {}
    print("width  passes  ms   x one  content a pass for 1.2x (fraction of fed)")
    for w in range(1, 9):
        x = cost(w) / cost(1)
        print(f"{w:5d}  {hist.get(str(w), 0):6d}  {cost(w):5.2f}  {x:4.2f}  "
              f"{1.2 * x:4.2f} ({1.2 * x / w:.0%})")


if __name__ == "__main__":
    main()
