"""Collect the preference rounds' small outputs (summaries, BoNBoN results and margins, frontier
signal, win rates, report) from runs/prefs into bench/results/prefs_rounds/* (runs/ is not kept
in git).

    python bench/collect_prefs_results.py
"""
import json, glob, os, shutil
out = {}
root = "runs/prefs"
out["agreement"] = json.load(open(f"{root}/agreement.json"))
rounds = {}
for d in sorted(glob.glob(f"{root}/lambda-*/round-*")):
    tag = d[len(root) + 1:]
    entry = {}
    p = f"{d}/prefs/summary.json"
    if os.path.exists(p):
        s = json.load(open(p)); s.pop("judge_agreement", None); entry["prefs"] = s
    p = f"{d}/bonbon/solm.json"
    if os.path.exists(p):
        m = json.load(open(p)); entry["bonbon"] = {"results": m["results"], "data": m["data"], "settings": {k: m["settings"][k] for k in ("learning_rate", "epochs", "batch_size", "lora_r", "alpha", "eval_rows")}}
        entry["bonbon"]["eval_margin_by_step"] = [(e["step"], round(e["eval_margin"], 4)) for e in map(json.loads, open(f"{d}/bonbon/train_log.jsonl")) if "eval_margin" in e]
    rounds[tag] = entry
out["rounds"] = rounds
for fr in ("frontier", "frontier-len", "frontier-own"):
    if os.path.exists(f"{root}/{fr}/summary.json"):
        out[fr] = {"summary": json.load(open(f"{root}/{fr}/summary.json"))}
        if os.path.exists(f"{root}/{fr}/signal.json"):
            out[fr]["signal"] = json.load(open(f"{root}/{fr}/signal.json"))
        if os.path.exists(f"{root}/{fr}/inf_vs_start_winrate.json"):
            out[fr]["inf_vs_start_winrate"] = json.load(open(f"{root}/{fr}/inf_vs_start_winrate.json"))
        if os.path.exists(f"{root}/{fr}/report/report.md"):
            shutil.copyfile(f"{root}/{fr}/report/report.md", f"bench/results/prefs_rounds/{fr}_report.md")
out["timeline"] = open(f"{root}/timeline.log").read().splitlines()
json.dump(out, open("bench/results/prefs_rounds/prefs_rounds.json", "w"), indent=1)
print("ok", list(rounds))
