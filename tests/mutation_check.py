"""Apply deliberate bugs to a copy of `solm/`, run the rule-pinning tests, report which fail.

    python tests/mutation_check.py [--out runs/mutations.json] [--only NAME ...]

Each mutation is a known-wrong reading of a rule: the ones that once slipped past the
train-vs-runtime consistency tests (where both sides shared the bug), and the planted
bugs in the eviction baselines, the judge and its job machinery, length control, SoT, the
compiled step's padding, the same-path guard and the token cap. Each names the tests that
must catch it (default: the rule-pinning set). The source tree is never
modified: each run copies the package and the tests into a temporary folder and runs pytest
there (so that copy is the `solm` the tests import).
A mutation that no test catches is reported and makes the script exit non-zero.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLICY_TESTS = ["tests/test_policy_oracles.py", "tests/test_policies.py"]
SOT_TESTS = ["tests/test_sot.py", "tests/test_sot_accounting.py"]
PDIFF_TESTS = ["tests/test_pdiff_structure.py", "tests/test_pdiff_runtime.py",
               "tests/test_pdiff_sft.py", "tests/test_pdiff_eval.py"]
MERGE_TESTS = ["tests/test_shard.py::test_merge_keeps_the_rows_its_output_already_holds",
               "tests/test_shard.py::test_merge_refuses_an_unfinished_shard",
               "tests/test_shard.py::test_merge_folder_refuses_to_overwrite_different_rows_and_"
               "carries_the_settings"]
PREFS_RERUN = ["tests/test_prefs.py::test_prefs_reruns_keep_earlier_pairs_and_refuse_other_"
               "settings"]
TESTS = ["tests/test_structure.py", "tests/test_oracles.py", "tests/test_runtime.py",
         "tests/test_collator.py", "tests/test_tip_structure.py", "tests/test_tip_runtime.py",
         "tests/test_policies.py", "tests/test_toy_policy.py", "tests/test_pasta_format.py"]

# name -> (file, exact text, replacement[, the tests that must catch it; default TESTS])
MUTATIONS: dict[str, tuple] = {
    "sync_waits_for_any_block": (
        "solm/decode/pasta/runtime.py",
        "feed_main = not self.join_before_sync and all(t.pending == v.async_close",
        "feed_main = not self.join_before_sync and any(t.pending == v.async_close"),
    "promise_length_table_rotated": (
        "solm/core/systems/pasta.py",
        "close = {vocab[promise_close(n)]: n for n in range(1, MAX_PROMISE_TENS + 1)}",
        "close = {vocab[promise_close(n)]: n % MAX_PROMISE_TENS + 1 "
        "for n in range(1, MAX_PROMISE_TENS + 1)}"),
    "tip_never_evicts": (
        "solm/decode/tip/policies.py",
        "        dead = req.tracker.dead  # type: ignore[attr-defined]\n",
        "        return []\n        dead = req.tracker.dead  # type: ignore[attr-defined]\n"),
    "pred_10x_dropped": (
        "solm/core/systems/pasta.py",
        "self.main_pos += 1 + (0 if self.overlap else self.block_span(v.close_tens[tok]))",
        "self.main_pos += 1"),
    "block_starts_one_late": (
        "solm/core/systems/pasta.py",
        "next_pos=pos + 1)",
        "next_pos=pos + 2)"),
    "promise_predicts_async": (
        "solm/core/systems/pasta.py",
        "    return attrs, targets\n",
        "    for i in range(len(token_ids) - 1):\n"
        "        if int(token_ids[i]) in vocab.close_tens and attrs[i].thread == MAIN:\n"
        "            targets[i] = int(token_ids[i + 1])\n"
        "    return attrs, targets\n"),
    # eviction baselines against their papers' rules
    "h2o_keeps_its_lightest_pages": (
        "solm/decode/tip/policies.py", "reverse=True)[: max_pages - recent]",
        "reverse=False)[: max_pages - recent]", POLICY_TESTS),
    "h2o_scores_stop_accumulating": (
        "solm/decode/tip/runtime.py", "p.score += float(total[start:start + n].sum())",
        "p.score = float(total[start:start + n].sum())", POLICY_TESTS),
    "streamingllm_keeps_a_whole_first_page": (
        "solm/decode/tip/policies.py", "[(first, min(self.sinks, len(first.tokens)))]",
        "[(first, len(first.tokens))]", POLICY_TESTS),
    "streaming_prompt_drops_a_page_the_answer_shares": (
        "solm/decode/tip/policies.py", "bool(page.tokens) and page.tokens[0] < prompt_tokens",
        "bool(page.tokens) and page.tokens[-1] < prompt_tokens", POLICY_TESTS),
    "streaming_prompt_outside_the_budget": (
        "solm/decode/tip/policies.py",
        "max(self.min_recent, self.budget // self.page_size - len(prompt))",
        "max(self.min_recent, self.budget // self.page_size)", POLICY_TESTS),
    "resume_takes_a_changed_max_steps": (
        "solm/train/checkpoint.py",
        "if max_steps > 0 and was_steps is not None and int(was_steps) != max_steps:",
        "if False:", ["tests/test_sft.py"]),
    "resumed_steps_counted_from_zero": (
        "solm/train/base.py", 'meta["results"]["steps_this_run"] = result.global_step - steps_before',
        'meta["results"]["steps_this_run"] = result.global_step', ["tests/test_sft.py"]),
    "recall_reads_the_state_before_its_step": (
        "solm/data/recall.py", "value = history[op.step][op.source]",
        "value = history[op.step - 1][op.source]", ["tests/test_recall_task.py"]),
    "recall_needs_drop_the_recalled_line": (
        "solm/data/recall.py", "            read.add(op.step)\n",
        "            read.discard(op.step)\n", ["tests/test_recall_task.py"]),
    "needs_rule_keeps_a_step_one_step_only": (
        "solm/annotate/tip_rules.py", "needed[i] = max(needed[i], j)",
        "needed[i] = max(needed[i], i + 1)", ["tests/test_recall_task.py"]),
    "needs_rule_takes_fresh_registers_first": (
        "solm/annotate/tip_rules.py", 'dead_first=rule == "needs")', "dead_first=False)",
        ["tests/test_recall_task.py"]),
    "hung_teardown_exits_with_failure": (
        "solm/train/base.py", "        os._exit(0)", "        os._exit(1)",
        ["tests/test_ddp_training.py"]),
    "teardown_grace_ends_a_closed_group_too": (
        "solm/train/base.py", "if not closed.wait(SHUTDOWN_GRACE_S):",
        "if closed.wait(SHUTDOWN_GRACE_S):", ["tests/test_ddp_training.py"]),
    # the judge and the job machinery
    "judge_cache_key_ignores_order": (
        "solm/judge/cache.py", "[judge, version, instruction, first, second]",
        "[judge, version, instruction, *sorted([first, second])]", ["tests/test_judge.py"]),
    "unreadable_reply_cap_never_reached": (
        "solm/judge/job.py", "if unreadable >= self.cfg.unreadable_tries:",
        "if unreadable >= self.cfg.max_tries:", ["tests/test_judge.py"]),
    "unreadable_cap_one_late": (
        "solm/judge/job.py", "if unreadable >= self.cfg.unreadable_tries:",
        "if unreadable > self.cfg.unreadable_tries:", ["tests/test_judge.py"]),
    "annotation_row_loses_its_last_try": (
        "solm/annotate/llm_job.py", "        for attempt in range(cfg.max_tries):",
        "        for attempt in range(cfg.max_tries - 1):", ["tests/test_annotate_llm.py"]),
    "running_job_cancel_ignored": (
        "solm/serve/engine.py",
        "            if live.job.cancelled.is_set() or self.abort.is_set():\n                self.batched.cancel(rid)",
        "            if self.abort.is_set():\n                self.batched.cancel(rid)",
        ["tests/test_serve_engine.py"]),
    "cancelled_job_not_counted": (
        "solm/serve/engine.py", "            if CANCELLED in done.result.flags:\n                self.cancelled_total += 1",
        "", ["tests/test_serve_engine.py"]),
    "tip_cancel_ignored": (
        "solm/serve/tip_engine.py",
        "            if live.job.cancelled.is_set() or self.abort.is_set():\n                self.session.cancel(rid)",
        "            if self.abort.is_set():\n                self.session.cancel(rid)",
        ["tests/test_serve_tip.py"]),
    "amx_tile_config_reads_8_bytes": (
        "solm/engines/llamacpp/amx_tilecfg.h", "(*(const unsigned char (*)[64])(config))",
        "(*(const void **)(config))", ["tests/test_amx_build.py"]),
    "token_bucket_ignores_its_burst": (
        "solm/core/llm/jobs.py",
        "self.capacity = burst if burst is not None else max(1.0, self.rate)",
        "self.capacity = max(1.0, self.rate)", ["tests/test_annotate_llm.py"]),
    "retry_after_is_a_ceiling": (
        "solm/core/llm/jobs.py", "delay = max(delay, min(retry_after, cfg.max_delay))",
        "delay = min(delay, min(retry_after, cfg.max_delay))", ["tests/test_jobs.py"]),
    "repeated_id_queued_twice": (
        "solm/core/llm/jobs.py", "        seen.add(item.id)\n        queue.put_nowait(item)",
        "        queue.put_nowait(item)", ["tests/test_jobs.py"]),
    # length control against alpaca_eval's rule
    "extreme_change_inclusive_edge": (
        "solm/eval/length_control.py", "too_small = lc < min(", "too_small = lc <= min(",
        ["tests/test_winrate.py"]),
    "lc_warning_never_set": (
        "solm/eval/length_control.py",
        'if is_extreme_change(out["win_rate"], out["lc_win_rate"]):',
        'if is_extreme_change(out["win_rate"], out["lc_win_rate"]) and False:',
        ["tests/test_winrate.py"]),
    # Skeleton-of-Thought
    "sot_prefix_split_takes_the_last_token": (
        "solm/decode/sot/runtime.py", "n = min(len(s) for s in sequences) - 1",
        "n = min(len(s) for s in sequences)", SOT_TESTS),
    "sot_point_one_token_over_its_cap": (
        "solm/decode/sot/runtime.py", "if len(generated[i]) >= config.max_point_tokens:",
        "if len(generated[i]) > config.max_point_tokens:", SOT_TESTS),
    "sot_skeleton_ignores_max_new_tokens": (
        "solm/decode/sot/runtime.py",
        "cap = min(config.max_skeleton_tokens, config.max_new_tokens or config.max_skeleton_tokens)",
        "cap = config.max_skeleton_tokens", SOT_TESTS),
    "sot_counts_generated_tokens_as_the_answer": (
        "solm/decode/sot/system.py",
        '                "content_tokens": len(text_ids(self.tokenizer, res.text)),',
        '                "content_tokens": res.generated_tokens,', SOT_TESTS),
    # the compiled step's padding
    "padded_rows_see_no_key": (
        "solm/engines/torch/compiled.py", "    mask[n:, 0] = True\n    pad = b - n",
        "    pad = b - n", ["tests/test_compiled_step.py"]),
    "pool_without_room_for_padding": (
        "solm/engines/torch/step.py",
        "                   pool_size + TOKEN_BUCKET_MAX if compile else pool_size)",
        "                   pool_size)", ["tests/test_compiled_step.py"]),
    # nothing destroyed, nothing misreported
    "same_path_guard_blind_to_links": (
        "solm/core/paths.py", "return os.path.samefile(pa, pb)", "return str(pa) == str(pb)",
        ["tests/test_same_path.py"]),
    "forced_async_not_counted_in_the_cap": (
        "solm/decode/pasta/runtime.py",
        "state.generated += 1  # the forced `<async>` is part of the answer too",
        "pass", ["tests/test_serve_app.py"]),
    # preference pairs and BoNBoN
    "bonbon_target_uses_h_n": (
        "solm/train/bonbon.py", "return (n - 1) * sum(1.0 / k for k in range(1, n))",
        "return (n - 1) * sum(1.0 / k for k in range(1, n + 1))", ["tests/test_bonbon.py"]),
    "forced_tokens_scored": (
        "solm/train/sequence_logprobs.py", "            targets[source] = IGNORE",
        "            pass", ["tests/test_sequence_logprobs.py"]),
    "eos_of_an_ended_answer_not_scored": (
        "solm/train/sequence_logprobs.py", "*([eos_id] if answer.ended else [])]", "]",
        ["tests/test_sequence_logprobs.py", "tests/test_bonbon.py"]),
    "malformed_sample_can_be_chosen": (
        "solm/prefs/score.py", "        return self.well_formed and not self.too_short",
        "        return not self.too_short", ["tests/test_prefs.py"]),
    "reference_is_the_live_policy": (
        "solm/train/bonbon.py", 'ref = (inputs["ref_chosen"], inputs["ref_rejected"])',
        "ref = (logps[:pairs].detach(), logps[pairs:].detach())", ["tests/test_bonbon.py"]),
    "judge_tie_counts_as_a_win": (
        "solm/eval/agreement.py", "        if p2 == 0.5:\n            agree += 0.5",
        "        if p2 == 0.5:\n            agree += 1", ["tests/test_agreement.py"]),
    # TIP annotation, SFT, GRPO, evaluation
    "annotator_kills_a_needed_step_first": (
        "solm/annotate/tip_rules.py", "            pool = free or list(holder)",
        "            pool = list(holder)", ["tests/test_tip_annotate.py"]),
    "refer_back_to_the_oldest_holder": (
        "solm/annotate/tip_rules.py", "        for k in keys:\n            last_holder[k] = j",
        "        for k in keys:\n            last_holder.setdefault(k, j)",
        ["tests/test_tip_annotate.py"]),
    "grpo_scores_under_a_causal_mask": (
        "solm/train/grpo.py",
        "    mask = structure_mask(model, tip_visible if tip else causal, attrs, real, device)",
        "    mask = structure_mask(model, causal, attrs, real, device)",
        ["tests/test_tip_grpo.py"]),
    "grpo_logprobs_ignore_temperature": (
        "solm/train/grpo.py", "    logits = logits[:, prompt_cols - 1:-1].float() / temperature",
        "    logits = logits[:, prompt_cols - 1:-1].float()", ["tests/test_tip_grpo.py"]),
    "kv_penalty_rewards_live_kv": (
        "solm/train/grpo.py", "        return [c - self.kv_penalty * k for c, k in zip(correct, kv)]",
        "        return [c + self.kv_penalty * k for c, k in zip(correct, kv)]",
        ["tests/test_tip_grpo.py"]),
    "first_box_counts": (
        "solm/core/math_task.py", "    start = starts[-1]", "    start = starts[0]",
        ["tests/test_math_task.py"]),
    "accuracy_pooled_over_samples": (
        "solm/eval/tip_eval.py",
        "        accuracy = sum(sum(v) / len(v) for v in by_problem.values()) / len(by_problem)",
        "        accuracy = sum(sum(v) for v in by_problem.values()) / len(rs)",
        ["tests/test_tip_eval.py"]),
    "tip_sft_prompt_tokens_trained": (
        "solm/train/tip_sft.py", "            targets[i] = IGNORE", "            pass",
        ["tests/test_tip_sft.py"]),
    # Planned Diffusion
    "pdiff_chunks_causal_inside": (
        "solm/core/systems/pdiff.py", "\n\npdiff_visible = or_masks(pasta_visible, whole_chunk)\n",
        "\n\npdiff_visible = pasta_visible\n", PDIFF_TESTS),
    "pdiff_no_shift": (
        "solm/core/systems/pdiff.py", "    return j - 1", "    return j", PDIFF_TESTS),
    "pdiff_sampler_reads_the_masked_row": (
        'solm/decode/pdiff/runtime.py',
        'torch.stack([row_of[predictor(j)] for j in masked])',
        'torch.stack([row_of[j] for j in masked])',
        ['tests/test_pdiff_structure.py', 'tests/test_pdiff_runtime.py', 'tests/test_pdiff_sft.py', 'tests/test_pdiff_eval.py']),
    "pdiff_ar_terms_divided_by_t": (
        "solm/train/pdiff_sft.py", "    per_sequence = (ar + diffusion) / norm.to(ce.device)",
        "    per_sequence = (ar / t.to(ce.device) + diffusion) / norm.to(ce.device)",
        PDIFF_TESTS),
    "pdiff_pads_past_the_slots": (
        "solm/core/systems/pdiff.py", "        need = len(content) + 2 + 1 + extra",
        "        need = len(content) + 2 + 1", PDIFF_TESTS),
    "pdiff_finished_chunks_recomputed": (
        "solm/decode/pdiff/runtime.py",
        "            if finished_too or not c.done:",
        "            if True:",
        PDIFF_TESTS),
    "pdiff_two_tokens_per_step": (
        "solm/decode/pdiff/runtime.py",
        "    k = masked if steps_left <= 1 else math.ceil(masked / steps_left)",
        "    k = masked if steps_left <= 1 else 2", PDIFF_TESTS),
    "pdiff_eos_allowed_in_chunks": (
        "solm/core/systems/pdiff.py",
        "        return [t for t in (*self.control_ids, *self.eos) if t not in pads]",
        "        return [t for t in self.control_ids if t not in pads]", PDIFF_TESTS),
    # what a new user tripped on (each pinned by a test written a second way)
    "merge_overwrites_the_output": (
        "solm/core/shard.py",
        "    if not out.exists():\n        return [], shard_rows, 0",
        "    if True:\n        return [], shard_rows, 0", MERGE_TESTS),
    "merge_takes_an_unfinished_shard": (
        "solm/core/shard.py",
        "    if not marker.get(\"complete\"):",
        "    if False:", MERGE_TESTS),
    "merge_ignores_missing_prompts_of_a_shard": (
        "solm/core/shard.py",
        "        if lacking:",
        "        if False:", MERGE_TESTS),
    "tied_pairs_written": (
        "solm/prefs/score.py",
        "        return Choice(None, None, n, TIED)",
        "        pass", ["tests/test_prefs.py::test_tied_samples_make_no_pair"]),
    "prefs_smaller_limit_drops_pairs": (
        "solm/cli/pasta_prefs.py",
        "    records = _with_earlier(records, all_records, out)",
        "    pass", PREFS_RERUN),
    "prefs_rerun_settings_unchecked": (
        "solm/cli/pasta_prefs.py",
        "    aside = guard_folder(out, row_settings, restart, RESULT_FILES)",
        "    aside = guard_folder(out, {}, restart, RESULT_FILES)", PREFS_RERUN),
    "agreement_ids_by_position": (
        "solm/cli/pasta_eval.py",
        "        pid = f\"ann-{i}-{_pair_digest(row)}\"",
        "        pid = f\"ann-{i}\"",
        ["tests/test_agreement.py::test_agreement_reruns_reuse_judgments_only_for_the_same_"
         "judge_and_pairs"]),
    "live_response_kv_counts_the_prompt": (
        "solm/decode/tip/runtime.py",
        "                first = len(r.req.prompt)",
        "                first = 0",
        ["tests/test_tip_runtime.py::test_live_response_kv_counts_the_response_tokens_read"]),
    "bonbon_reference_not_the_sampler": (
        "solm/train/bonbon.py",
        "            cfg.model = sampler",
        "            cfg.model = \"smollm2-135m\"",
        ["tests/test_bonbon.py::test_the_reference_defaults_to_the_model_the_pairs_were_"
         "sampled_from"]),
    "bonbon_ids_unchecked_against_the_tokenizer": (
        "solm/train/bonbon.py",
        "        check_pair_ids(rows, len(tokenizer), cfg.data)\n",
        "",
        ["tests/test_bonbon.py::test_token_ids_outside_the_tokenizer_are_named_not_an_index_"
         "error"]),
    "command_default_without_reason": (
        "solm/cli/setting_options.py", "    if own and not why:\n", "    if False:\n",
        ["tests/test_decode_settings_once.py"]),
    "request_field_bounds_not_the_settings": (
        "solm/serve/openai_schema.py",
        '    return Field(None, ge=m.get("min"), le=m.get("max"), gt=m.get("above"))',
        '    return Field(None, ge=m.get("min"), le=m.get("max"))',
        ["tests/test_decode_settings_once.py"]),
    "decode_side_attached_to_another_system": (
        "solm/core/systems/__init__.py",
        "    SYSTEMS[name] = dataclasses.replace(system, decoder=decoder)",
        "    SYSTEMS[name] = dataclasses.replace(system, decoder=decoder)\n"
        "    if name == \"pdiff\":\n        SYSTEMS[\"sot\"] = dataclasses.replace(SYSTEMS[\"sot\"], decoder=decoder)",
        ["tests/test_engine_matrix.py", "tests/test_cli_input_checks.py"]),
    "pdiff_method_options_unchecked": (
        "solm/eval/methods.py",
        "        check_settings(system.config_cls(**system.evaluation.methods[kind], **values))\n",
        "        pass\n",
        ["tests/test_cli_input_checks.py::test_eval_run_checks_pdiff_method_options_before_"
         "loading"]),
    "float_options_take_nan": (
        "solm/cli/errors.py",
        "        if isinstance(number, float) and not math.isfinite(number):",
        "        if False:",
        ["tests/test_cli_input_checks.py::test_other_spellings_are_refused_too"]),
    "shard_auto_unchecked_env": (
        "solm/core/shard.py",
        "        if \"WORLD_SIZE\" not in env or \"RANK\" not in env:",
        "        if not env:\n            return None\n        if \"WORLD_SIZE\" not in env or \"RANK\" not in env:",
        ["tests/test_shard.py::test_parse"]),
    "demo_sequential_timed_cold": (
        "solm/decode/pasta/demo.py",
        "    parallel_run(), sequential_run()  # warm both paths",
        "    parallel_run()  # warm both paths",
        ["tests/test_demo.py::test_both_sides_are_warmed_then_timed_in_alternating_order"]),
    "batched_admits_past_max_batch": (
        "solm/decode/pasta/batched.py",
        "        while waiting and len(running) < self.max_batch:",
        "        while waiting and len(running) <= self.max_batch:",
        ["tests/test_batched.py::test_never_more_requests_in_flight_than_max_batch"]),
    # the planted bugs that passed the tests then
    "prefs_unjudged_quality_zero": (
        "solm/prefs/job.py",
        "quality, unjudged = (sum(wins) / len(wins), False) if wins else (0.5, True)",
        "quality, unjudged = (sum(wins) / len(wins), False) if wins else (0.0, True)",
        ["tests/test_prefs.py::test_a_sample_every_judgment_of_which_was_rejected_is_a_tie"]),
    "prefs_samples_share_a_seed": (
        "solm/prefs/job.py",
        "seed=self.seed + job.sample))",
        "seed=self.seed))",
        PREFS_RERUN),
    "agreement_interval_over_every_row": (
        "solm/eval/agreement.py",
        "    lo, hi = wilson_interval(agree, decided)",
        "    lo, hi = wilson_interval(agree, len(judgments))",
        ["tests/test_agreement.py::test_the_report_counts"]),
    "shard_auto_reads_local_rank": (
        "solm/core/shard.py",
        "world, rank = int(env[\"WORLD_SIZE\"]), int(env[\"RANK\"])",
        "world, rank = int(env[\"WORLD_SIZE\"]), int(env.get(\"LOCAL_RANK\", 0))",
        ["tests/test_shard.py::test_parse"]),
    "integer_answers_truncated": (
        "solm/core/math_task.py",
        "    m = re.fullmatch(r\"(-?\\d+)\\.0+\", s)",
        "    m = re.fullmatch(r\"(-?\\d+)\\.\\d+\", s)",
        ["tests/test_math_task.py"]),
    "grpo_kv_term_counts_the_prompt": (
        "solm/train/grpo.py",
        "            \"live_response_kv\": [r.mean_live_response_tokens for r in out],",
        "            \"live_response_kv\": [r.mean_live_tokens for r in out],",
        ["tests/test_tip_grpo.py::test_recomputed_logprobs_equal_the_runtimes_sampling_"
         "logprobs"]),
    "serve_request_temperature_zero_ignored": (
        "solm/serve/app.py",
        "        temperature=s.temperature if req.temperature is None else req.temperature,",
        "        temperature=req.temperature or s.temperature,",
        ["tests/test_serve_settings.py"]),
    "serve_request_mode_ignored": (
        "solm/serve/engine.py",
        "        config = replace(defaults, mode=req.mode or defaults.mode,",
        "        config = replace(defaults, mode=defaults.mode,",
        ["tests/test_serve_settings.py"]),
    "pdiff_sft_first_response_label_dropped": (
        "solm/train/pdiff_sft.py",
        "            if i >= prompt_len - 1 and target != IGNORE and i + 1 < n:",
        "            if i >= prompt_len and target != IGNORE and i + 1 < n:",
        ["tests/test_pdiff_sft.py::test_collator_masks_only_chunk_content_and_labels_what_it_"
         "masked"]),
    "pdiff_sft_prompt_token_labelled": (
        "solm/train/pdiff_sft.py",
        "            if i >= prompt_len - 1 and target != IGNORE and i + 1 < n:",
        "            if i >= prompt_len - 2 and target != IGNORE and i + 1 < n:",
        ["tests/test_pdiff_sft.py::test_collator_masks_only_chunk_content_and_labels_what_it_"
         "masked"]),
    "bench_replays_never_alternate": (
        "solm/eval/pasta_bench.py",
        "        for name in (order if k % 2 == 0 else order[::-1]):",
        "        for name in order:",
        ["tests/test_pasta_bench.py"]),
    "tip_rules_zero_and_one_are_keys": (
        "solm/annotate/tip_rules.py",
        "_TRIVIAL_NUMBERS = {\"0\", \"1\"}",
        "_TRIVIAL_NUMBERS: set[str] = set()",
        ["tests/test_tip_annotate.py"]),
    "tip_register_use_ignores_the_holder": (
        "solm/annotate/tip_rules.py",
        "            if holder.get(reg) == i:\n",
        "            if reg in holder:\n",
        ["tests/test_tip_annotate.py"]),
    "tip_register_choice_ignores_last_use": (
        "solm/annotate/tip_rules.py",
        "            reg = min(pool, key=lambda r: (last_use[r], holder[r]))",
        "            reg = min(pool)",
        ["tests/test_tip_annotate.py"]),
    "tip_sft_length_filter_reads_the_stripped_text": (
        "solm/train/tip_sft.py",
        "                     \"longest_text\": annotated})",
        "                     \"longest_text\": text})",
        ["tests/test_tip_sft.py"]),
    "pdiff_threshold_takes_deferred_pads": (
        'solm/decode/pdiff/runtime.py',
        '        keep |= {i for i in range(masked) if confidence[i] >= cfg.confidence_threshold\n                 and not (cfg.defer_pads and is_pad[i])}',
        '        keep |= {i for i in range(masked) if confidence[i] >= cfg.confidence_threshold}',
        ['tests/test_pdiff_runtime.py']),
    "pdiff_confidence_order_reversed": (
        'solm/decode/pdiff/runtime.py',
        'score = entropy if cfg.order == "entropy" else [-c for c in confidence]',
        'score = entropy if cfg.order == "entropy" else list(confidence)',
        ['tests/test_pdiff_runtime.py']),
    "pdiff_steps_ratio_rounds_down": (
        "solm/decode/pdiff/runtime.py",
        "chunk.budget = max(1, math.ceil(len(chunk.masked) * cfg.steps_ratio))",
        "chunk.budget = max(1, int(len(chunk.masked) * cfg.steps_ratio))",
        ["tests/test_pdiff_runtime.py"]),
    "pdiff_schedule_rounds_down": (
        "solm/decode/pdiff/runtime.py",
        "k = masked if steps_left <= 1 else math.ceil(masked / steps_left)",
        "k = masked if steps_left <= 1 else max(1, masked // steps_left)",
        ["tests/test_pdiff_runtime.py"]),
    "pdiff_runtime_ignores_the_length_scale": (
        "solm/decode/pdiff/runtime.py",
        "        sizes = [chunk_slots(c.tens, cfg.length_scale) for c in run.planned]",
        "        sizes = [chunk_slots(c.tens) for c in run.planned]",
        ["tests/test_pdiff_runtime.py"]),
    "pdiff_chunk_temperature_multiplies": (
        'solm/decode/pdiff/runtime.py',
        'torch.log_softmax(logits / t[:, None], dim=-1)',
        'torch.log_softmax(logits * t[:, None], dim=-1)',
        ['tests/test_pdiff_runtime.py']),
    "pdiff_deferred_pads_lose_their_order": (
        'solm/decode/pdiff/runtime.py',
        '        order = sorted(order, key=lambda i: bool(is_pad[i]))',
        '        order = sorted(range(masked), key=lambda i: bool(is_pad[i]))',
        ['tests/test_pdiff_runtime.py']),
    "given_gguf_takes_the_asked_type": (
        "solm/engines/llamacpp/given.py", "    return ftype\n", "    return asked_type\n",
        ["tests/test_given_gguf.py"]),
    "given_gguf_without_its_tokens_runs": (
        "solm/engines/llamacpp/given.py", "    if missing:\n", "    if missing and False:\n",
        ["tests/test_given_gguf.py"]),
    "refused_prompts_exit_zero": (
        "solm/decode/jobs.py", "    if not refused:\n        return\n",
        "    if True:\n        return\n", ["tests/test_batch_refusals.py"]),
    "a_prompt_filling_the_context_fits": (
        "solm/core/chat.py", "if limit is None or len(ids) < limit:",
        "if limit is None or len(ids) <= limit:", ["tests/test_batch_refusals.py"]),
    "offline_names_go_to_the_hub": (
        "solm/core/models.py", 'if os.environ.get("HF_HUB_OFFLINE") == "1" or not _hub_reachable():',
        "if False:", ["tests/test_batch_refusals.py"]),
    "empty_distill_exits_zero": (
        "solm/cli/pasta_distill.py", "    if empty and not summary.answers_left:",
        "    if False:", ["tests/test_own_answers.py"]),
    "critical_path_counts_the_stops_closers": (
        "solm/core/systems/pasta_schedule.py", "        if i in skip:\n            continue\n",
        "", ["tests/test_demo.py"]),
    "wandering_repeats_kept": (
        "solm/eval/step_cost.py", "for k, v in sorted(self.spread.items()) if v > SPREAD_BOUND]",
        "for k, v in sorted(self.spread.items()) if v > 10 * SPREAD_BOUND]",
        ["tests/test_step_cost_flags.py"]),
    "flagged_rows_kept_for_auto": (
        "solm/engines/cost.py", '    return [e for e in result["engines"] if not e.get("flags")]',
        '    return list(result["engines"])', ["tests/test_step_cost_flags.py"]),
    "flash_on_when_only_the_sum_is_faster": (
        "solm/engines/cost.py", " and f[min(f, key=int)] < o[min(o, key=int)]", "",
        ["tests/test_step_cost_flags.py"]),
    "a_busy_bandwidth_probe_is_kept": (
        "solm/engines/bandwidth.py", "    if max(times) / min(times) > BANDWIDTH_SPREAD:",
        "    if False:", ["tests/test_step_cost_flags.py"]),
    "help_names_cut_at_80_columns": (
        "solm/cli/console.py", "            column.min_width = max(column.min_width or 0, longest)",
        "            pass", ["tests/test_help_width.py"]),
    "empty_prompt_argument_decoded": (
        "solm/cli/decode_command.py", "    if text is not None and not text.strip():",
        "    if False:", ["tests/test_batch_refusals.py"]),
    "torch_engine_silent": (
        "solm/engines/torch/engine.py", '        notice(f"engine torch: ', '        (f"engine torch: ',
        ["tests/test_batch_refusals.py"]),
    "amx_compiles_like_avx512": (
        "solm/engines/torch/compiled.py", '        return "amx"\n', '        return "avx512_bf16"\n',
        ["tests/test_step_cost_flags.py"]),
    "pdiff_threshold_commits_below_it": (
        'solm/decode/pdiff/runtime.py',
        'if confidence[i] >= cfg.confidence_threshold',
        'if confidence[i] > cfg.confidence_threshold',
        ['tests/test_rule_oracles.py']),
    "tracking_add_forgets_the_modulus": (
        "solm/data/tracking.py",
        "values[t] = (old + op.digit if op.kind == \"add\" else old - op.digit) % MODULUS",
        "values[t] = (old + op.digit if op.kind == \"add\" else old - op.digit) % (MODULUS + 1)",
        ["tests/test_tracking_task.py"]),
    "tracking_verifier_reads_the_first_box": (
        "solm/core/math_task.py", "    start = starts[-1]\n", "    start = starts[0]\n",
        ["tests/test_tracking_task.py"]),
    "tracking_rows_not_integer_graded": (
        "solm/core/math_task.py", '    if row.get("task"):  # a task', '    if False:  # a task',
        ["tests/test_tracking_task.py"]),
    "register_rows_start_identical": (
        "solm/core/vocabulary.py", "                emb[token] = emb[words].mean(dim=0)\n",
        "                pass\n", ["tests/test_control_tokens.py"]),
    "tip_reward_drops_the_kv_cap": (
        "solm/train/grpo.py", "return min(1.0, max(0.0, live_response_tokens / max_completion_length))",
        "return max(0.0, live_response_tokens / max_completion_length)",
        ["tests/test_tracking_task.py"]),
    # what a new user sees: the training prompt, the yardstick, refusals, figures, help
    "decode_drops_the_trained_instruction": (
        "solm/core/chat.py", "    prompt = with_instruction(prompt, tokenizer_instruction(tokenizer))\n",
        "", ["tests/test_prompt_format.py"]),
    "instruction_appended_twice": (
        "solm/core/prompt_format.py", "if not instruction or prompt.rstrip().endswith(instruction):",
        "if not instruction:", ["tests/test_prompt_format.py"]),
    "tip_sft_records_no_instruction": (
        "solm/train/tip_sft.py",
        "return INSTRUCTION if self.config.math_prompt else super().prompt_instruction(tokenizer)",
        "return super().prompt_instruction(tokenizer)", ["tests/test_prompt_format.py"]),
    "fate_read_as_markup": (
        "solm/cli/decode_command.py", 'f"{escape(system.display.row_text(row))}")',
        'f"{system.display.row_text(row)}")', ["tests/test_tip_display.py"]),
    "one_command_defaults_to_torch": (
        "solm/decode/registry.py", 'engine: str = setting("auto", ENGINE_HELP,',
        'engine: str = setting("torch", ENGINE_HELP,', ["tests/test_compare_and_defaults.py"]),
    "data_make_replaces_what_it_made": (
        "solm/cli/data.py", "    if not force and existing_output(out, settings):",
        "    if False:", ["tests/test_tracking_task.py"]),
    "gold_list_accepted": (
        "solm/core/math_task.py",
        "if isinstance(value, bool) or not isinstance(value, (str, int, float)):",
        "if isinstance(value, bool):", ["tests/test_tip_cli.py"]),
    "registers_other_than_the_models_accepted": (
        "solm/core/models.py", "if own is not None and asked is not None and asked != own:",
        "if False:", ["tests/test_tip_cli.py"]),
    "long_prompt_checked_after_loading": (
        "solm/cli/decode_command.py", "    check_prompts_fit(model, asked)\n", "",
        ["tests/test_tip_cli.py"]),
    "tip_summary_weights_live_kv_by_tokens": (
        "solm/decode/tip/decode_file.py", "self.live_tokens_sum += res.mean_live_tokens\n",
        "self.live_tokens_sum += res.mean_live_tokens * res.generated / 10\n",
        ["tests/test_tip_display.py"]),
    "stopped_segment_counted_in_throughput": (
        "solm/eval/tip_eval.py", '(data, policy, budget) and t.get("complete", True)]',
        "(data, policy, budget)]", ["tests/test_tip_eval.py"]),
    "help_keeps_typers_name_columns": (
        "solm/cli/console.py", "        if len(cells) >= 6:  # an options panel",
        "        if False:  # an options panel", ["tests/test_help_width.py"]),
    "yardstick_in_this_process": (
        "solm/engines/llamacpp/fresh_loop.py", "        first = self.proc.stdout.readline()\n",
        "        import os as _os\n        assert self.proc.pid == _os.getpid()\n"
        "        first = self.proc.stdout.readline()\n", ["tests/test_llamacpp.py"]),
    "own_loop_reads_another_row": (
        "solm/engines/llamacpp/own_loop.py", "logits = self.L.llama_get_logits_ith(self.ctx.ctx, -1)",
        "logits = self.L.llama_get_logits_ith(self.ctx.ctx, 0)", ["tests/test_llamacpp.py"]),
    "ort_spins_between_passes": (
        "solm/engines/onnxruntime/session.py",
        'options.add_session_config_entry("session.intra_op.allow_spinning", "0")',
        'options.add_session_config_entry("session.intra_op.allow_spinning", "1")',
        ["tests/test_onnxruntime.py"]),
    "degenerate_chunk_well_formed": (
        "solm/decode/pdiff/decode_file.py",
        "return len(words) >= 2 and max(words.count(w) for w in set(words)) > len(words) / 2",
        "return False", ["tests/test_pdiff_runtime.py", "tests/test_pdiff_eval.py"]),
    "join_refeeds_final_blocks": (
        "solm/decode/pdiff/runtime.py",
        "            return [j for j in range(len(c.tokens)) if j not in c.final]",
        "            return list(range(len(c.tokens)))", ["tests/test_pdiff_runtime.py",
                                                       "tests/test_pdiff_blocks.py"]),
    "join_pass_not_counted": (
        "solm/decode/pdiff/runtime.py", "                run.join_passes += 1\n", "",
        ["tests/test_pdiff_blocks.py"]),
    # the audit's modules, each against an oracle written another way
    "trace_work_shows_the_new_value_as_old": (
        "solm/data/tracking.py", 'work = f"{t} = {old} {sign} {op.digit} = {values[t]}"',
        'work = f"{t} = {values[t]} {sign} {op.digit} = {values[t]}"',
        ["tests/test_tracking_task.py"]),
    "generator_adds_zero": (
        "solm/data/tracking.py", "digit=rng.randint(1, MODULUS - 1)", "digit=rng.randint(0, MODULUS - 1)",
        ["tests/test_tracking_task.py"]),
    "grader_reads_the_first_box": (
        "solm/core/math_task.py", "    start = starts[-1]\n", "    start = starts[0]\n",
        ["tests/test_tracking_task.py"]),
    "varying_groups_counted_by_any_right": (
        "solm/train/grpo.py", "return [len(set(correct[i:i + group])) > 1 for i in range(0, len(correct), group)]",
        "return [max(correct[i:i + group]) > 0 for i in range(0, len(correct), group)]",
        ["tests/test_tip_grpo.py"]),
    "penalty_raises_negative_logits": (
        "solm/core/sampling.py",
        "x.index_put((rows, toks), torch.where(vals > 0, vals / factor, vals * factor))",
        "x.index_put((rows, toks), vals / factor)", ["tests/test_device_sampling.py"]),
    "unpack_drops_generation_config": (
        "solm/core/adapter_packing.py", 'SIDE_FILES = (CONFIG, META, "generation_config.json")',
        "SIDE_FILES = (CONFIG, META)", ["tests/test_adapters.py"]),
    "cache_key_ignores_side_files": (
        "solm/core/models.py", "    for path in [*files, *(p for p in sides if p.is_file())]:",
        "    for path in files:", ["tests/test_adapters.py"]),
    "block_edge_row_from_its_first_slot": (
        "solm/decode/pdiff/runtime.py",
        "edge = [min(current) - 1] if c.block > 0 and not c.stale else []",
        "edge = []", ["tests/test_pdiff_blocks.py"]),
    "ort_paged_prefill_not_causal": (
        "solm/engines/onnxruntime/step.py", "np.tril(np.ones((n, n), bool))],",
        "np.ones((n, n), bool)],", ["tests/test_onnxruntime.py"]),
    "ort_graph_key_ignores_registers": (
        "solm/engines/onnxruntime/session.py", "                       registers=num_registers, format=fmt,",
        "                       format=fmt,", ["tests/test_onnxruntime.py"]),
    # the GPU step as one graph: a per-row op or an extra upload is seen
    "device_step_uploads_twice": (
        "solm/engines/torch/device_step.py", "        released, self._released = self._released, []\n",
        "        released, self._released = self._released, []\n"
        "        torch.tensor(list(tokens))\n", ["tests/test_pass_work.py"]),
    "sampling_stacks_a_mask_per_row": (
        "solm/core/sampling.py",
        "        stack = torch.stack([_on_device(m, device, v) for m in table.masks])",
        "        stack = torch.stack([_on_device(m, device, v) for m in table.masks])\n"
        "        _ = [stack[0][:1] for _ in range(table.rows)]",
        ["tests/test_pass_work.py"]),
    "device_paged_kv_op_per_row": (
        "solm/engines/torch/device_paged.py", "            books.shown |= set(fresh)\n",
        "            books.shown |= set(fresh)\n            self.owner[:1].clone()\n",
        ["tests/test_pass_work.py"]),
    "pdiff_job_rows_gathered_per_chunk": (
        "solm/decode/pdiff/runtime.py", "        logits = logits.index_select(0, rows).float()",
        "        _ = [logits[r] for r in table[0].long().tolist()[:0]] + "
        "[logits[:1] for _ in jobs]\n        logits = logits.index_select(0, rows).float()",
        ["tests/test_pass_work.py"]),
    "draining_counts_the_shutdowns_cancels": (
        "solm/serve/engine.py",
        "            if CANCELLED in done.result.flags and self.abort.is_set():\n"
        "                live.job.emit(\"error\", _shutdown_error())\n                continue\n",
        "", ["tests/test_serve_app.py"]),
}


# The re-audit: new one-line bugs in the areas the audit named, planted before looking
# at which tests cover them; `--audit` runs them against each area's whole test files and
# reports the share caught (it does not fail on an uncaught one: that is the measurement).
AUDIT: dict[str, tuple] = {
    "batched_exact_fit_refused": (
        "solm/decode/pasta/batched.py", "        if need > self.pool_size:",
        "        if need >= self.pool_size:", ["tests/test_batched.py"]),
    "batched_shared_prompt_not_read": (
        "solm/decode/pasta/batched.py",
        "        return own if run.prefix is None else [(run.prefix.start, run.prefix.end), *own]",
        "        return own", ["tests/test_batched.py"]),
    "serve_top_p_ignored": (
        "solm/serve/app.py", "        top_p=s.top_p if req.top_p is None else req.top_p,",
        "        top_p=s.top_p,", ["tests/test_serve_settings.py", "tests/test_serve.py"]),
    "serve_max_tokens_cap_inclusive": (
        "solm/serve/app.py", "    if cap is not None and cap > d.max_new_tokens:",
        "    if cap is not None and cap >= d.max_new_tokens:",
        ["tests/test_serve_settings.py", "tests/test_serve.py"]),
    "prefs_own_speed_swapped": (
        "solm/prefs/job.py",
        "numerator = s[\"content_tokens\"] if speed == \"own\" else baseline_tokens",
        "numerator = s[\"content_tokens\"] if speed != \"own\" else baseline_tokens",
        ["tests/test_prefs.py"]),
    "prefs_worst_is_the_runner_up": (
        "solm/prefs/score.py", "    best, worst = order[0], order[-1]",
        "    best, worst = order[0], order[1]", ["tests/test_prefs.py"]),
    "prefs_quality_added_unweighted": (
        "solm/prefs/score.py",
        "    return s.speedup + (quality_weight * (s.quality or 0.0) if quality_weight else 0.0)",
        "    return s.speedup + ((s.quality or 0.0) if quality_weight else 0.0)",
        ["tests/test_prefs.py"]),
    "bonbon_ipo_target_one_term_too_many": (
        "solm/train/bonbon.py", "    return (n - 1) * sum(1.0 / k for k in range(1, n))",
        "    return (n - 1) * sum(1.0 / k for k in range(1, n + 1))", ["tests/test_bonbon.py"]),
    "bonbon_alpha_weights_swapped": (
        "solm/train/bonbon.py", "    loss = alpha * sft + (1 - alpha) * ipo",
        "    loss = (1 - alpha) * sft + alpha * ipo", ["tests/test_bonbon.py"]),
    "agreement_tie_counts_as_agreeing": (
        "solm/eval/agreement.py", "            agree += 0.5", "            agree += 1",
        ["tests/test_agreement.py"]),
    "agreement_soft_ignores_the_truth": (
        "solm/eval/agreement.py", "        soft += p2 if truth == 2 else 1 - p2",
        "        soft += p2", ["tests/test_agreement.py"]),
    "tip_rules_three_letter_names": (
        "solm/annotate/tip_rules.py", "_NAMED = re.compile(r\"\\b([A-Za-z]{4,})",
        "_NAMED = re.compile(r\"\\b([A-Za-z]{3,})", ["tests/test_tip_annotate.py"]),
    "tip_rules_split_after_abbreviations": (
        "solm/annotate/tip_rules.py",
        "            and not _ABBREVIATION.search(text[max(0, m.start() - 12):m.start()])]",
        "            ]", ["tests/test_tip_annotate.py"]),
    "math_two_unreadable_integers_agree": (
        "solm/core/math_task.py",
        "        return value is not None and value == integer_of(gold)",
        "        return value == integer_of(gold)", ["tests/test_math_task.py"]),
    "grpo_kv_term_unclamped": (
        "solm/train/grpo.py",
        "    return min(1.0, max(0.0, live_response_tokens / max_completion_length))",
        "    return max(0.0, live_response_tokens / max_completion_length)",
        ["tests/test_tip_grpo.py"]),
    "tip_eval_decode_time_per_problem": (
        "solm/eval/tip_eval.py",
        "            \"decode_s\": round(sum(r[\"decode_s\"] for r in rs) / n, 2),",
        "            \"decode_s\": round(sum(r[\"decode_s\"] for r in rs) / len(by_problem), 2),",
        ["tests/test_tip_eval.py"]),
    "tip_eval_every_token_opens_a_step": (
        "solm/core/systems/tip.py", "        opened += int(t) in vocab.registers",
        "        opened += 1", ["tests/test_tip_eval.py"]),
    "tip_sft_no_math_instruction": (
        "solm/train/tip_sft.py",
        "                     \"prompt\": with_instruction(prompt) if math_prompt else prompt,",
        "                     \"prompt\": prompt,", ["tests/test_tip_sft.py"]),
    "pdiff_layout_without_a_guaranteed_pad": (
        "solm/core/systems/pdiff.py", "        need = len(content) + 2 + 1 + extra",
        "        need = len(content) + 2 + extra",
        ["tests/test_pdiff_structure.py", "tests/test_pdiff_sft.py"]),
    "pdiff_chunks_see_each_other": (
        "solm/core/systems/pdiff.py",
        "    return (k[\"thread\"] > MAIN) & (k[\"thread\"] == q[\"thread\"])",
        "    return (k[\"thread\"] > MAIN) & (q[\"thread\"] > MAIN)", PDIFF_TESTS),
    "pdiff_continuation_cap_one_late": (
        "solm/decode/pdiff/runtime.py",
        "run.after_sync is not None and run.after_sync >= cfg.max_continuation",
        "run.after_sync is not None and run.after_sync > cfg.max_continuation",
        ["tests/test_pdiff_runtime.py"]),
    "shard_rows_overlap": (
        "solm/core/shard.py", "        return [x for i, x in enumerate(items) if i % self.count == self.index]",
        "        return [x for i, x in enumerate(items) if i % self.count <= self.index]",
        ["tests/test_shard.py"]),
}


# The re-audit's second round: new one-line bugs in the same areas, planted after the first
# round's tests were added (`--audit2`).
AUDIT2: dict[str, tuple] = {
    "batched_shared_prompt_takes_its_own_slots_too": (
        "solm/decode/pasta/batched.py",
        "        own = self._budget(req) if prefix is not None else len(prompt) + self._budget(req)",
        "        own = len(prompt) + self._budget(req)", ["tests/test_batched.py"]),
    "serve_request_seed_ignored": (
        "solm/serve/app.py", "        seed=s.seed if req.seed is None else req.seed,",
        "        seed=s.seed,", ["tests/test_serve_settings.py", "tests/test_serve.py"]),
    "prefs_length_ratio_reads_the_critical_path": (
        "solm/prefs/job.py",
        "too_short=s[\"content_tokens\"] < min_length_ratio * baseline_tokens,",
        "too_short=s[\"critical_path\"] < min_length_ratio * baseline_tokens,",
        ["tests/test_prefs.py"]),
    "prefs_one_malformed_sample_skips_the_prompt": (
        "solm/prefs/score.py", "    if not any(s.well_formed for s in samples):",
        "    if not all(s.well_formed for s in samples):", ["tests/test_prefs.py"]),
    "bonbon_margin_crosses_the_references": (
        "solm/train/bonbon.py",
        "    margin = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)",
        "    margin = (policy_chosen - ref_rejected) - (policy_rejected - ref_chosen)",
        ["tests/test_bonbon.py"]),
    "agreement_undecided_band_too_wide": (
        "solm/eval/agreement.py", "        if abs(p2 - 0.5) < 0.05:",
        "        if abs(p2 - 0.5) < 0.5:", ["tests/test_agreement.py"]),
    "math_trailing_period_kept": (
        "solm/core/math_task.py", "    s = s.rstrip(\".\").strip()", "    s = s.strip()",
        ["tests/test_math_task.py"]),
    "grpo_groups_of_one": (
        "solm/train/grpo.py",
        "    return [len(set(correct[i:i + group])) > 1 for i in range(0, len(correct), group)]",
        "    return [len(set(correct[i:i + group])) > 1 for i in range(0, len(correct), 1)]",
        ["tests/test_tip_grpo.py"]),
    "tip_eval_any_flag_counts_as_capped": (
        "solm/eval/tip_eval.py",
        "            \"capped\": sum(\"max_new_tokens\" in r[\"flags\"] for r in rs),",
        "            \"capped\": sum(bool(r[\"flags\"]) for r in rs),", ["tests/test_tip_eval.py"]),
    "pdiff_continuation_counts_the_sync": (
        "solm/decode/pdiff/runtime.py",
        "        if tok == v.sync and run.after_sync is None:\n            run.after_sync = 0",
        "        if tok == v.sync and run.after_sync is None:\n            run.after_sync = 1",
        ["tests/test_pdiff_runtime.py"]),
    "shard_index_bound_inclusive": (
        "solm/core/shard.py", "        if self.count < 1 or not 0 <= self.index < self.count:",
        "        if self.count < 1 or not 0 <= self.index <= self.count:", ["tests/test_shard.py"]),
    "tip_sft_dense_rows_keep_registers": (
        "solm/train/tip_sft.py", "            text, tagged = strip_registers(text), False",
        "            tagged = False", ["tests/test_tip_sft.py"]),
}

# The re-audit's third round: new one-line bugs in the same areas, planted from reading the
# code only (`--audit3`).
AUDIT3: dict[str, tuple] = {
    'batched_kv_read_leaves_out_the_shared_prompt': (
        'solm/decode/pasta/batched.py',
        '            state.kv_read += run.next_slot - run.start + (\n                run.prefix.end - run.prefix.start if run.prefix else 0)',
        '            state.kv_read += run.next_slot - run.start',
        ['tests/test_batched.py']),
    'batched_pool_exactly_full_refused': (
        'solm/decode/pasta/batched.py',
        '        if need > self.pool_size:',
        '        if need >= self.pool_size:',
        ['tests/test_batched.py']),
    'serve_request_penalize_ignored': (
        'solm/serve/engine.py',
        'penalize=req.penalize or defaults.penalize, record_logits=False)',
        'penalize=defaults.penalize, record_logits=False)',
        ['tests/test_serve_settings.py', 'tests/test_serve.py', 'tests/test_serve_app.py', 'tests/test_serve_engine.py']),
    'serve_chat_cap_prefers_max_tokens': (
        'solm/serve/openai_schema.py',
        '        return self.max_completion_tokens or self.max_tokens',
        '        return self.max_tokens or self.max_completion_tokens',
        ['tests/test_serve_settings.py', 'tests/test_serve.py', 'tests/test_serve_app.py', 'tests/test_serve_engine.py']),
    'prefs_ties_go_to_the_later_sample': (
        'solm/prefs/score.py',
        '    order = sorted(samples, key=lambda s: (sort_key(s, quality_weight), -s.sample),',
        '    order = sorted(samples, key=lambda s: (sort_key(s, quality_weight), s.sample),',
        ['tests/test_prefs.py']),
    'prefs_well_formed_rate_over_distinct': (
        'solm/prefs/job.py',
        '            wf += [row["well_formed"] for row in rows]',
        '            wf += [x.well_formed for x in scored]',
        ['tests/test_prefs.py']),
    'bonbon_length_filter_reads_the_shorter_answer': (
        'solm/train/bonbon.py',
        '            return len(c.prompt_ids) + max(len(c.response_ids), len(r.response_ids)) + 1',
        '            return len(c.prompt_ids) + min(len(c.response_ids), len(r.response_ids)) + 1',
        ['tests/test_bonbon.py', 'tests/test_sequence_logprobs.py']),
    'bonbon_first_answer_token_not_scored': (
        'solm/train/sequence_logprobs.py',
        '    for i in range(p - 1):\n        targets[i] = IGNORE',
        '    for i in range(p):\n        targets[i] = IGNORE',
        ['tests/test_bonbon.py', 'tests/test_sequence_logprobs.py']),
    'agreement_preference_one_names_no_winner': (
        'solm/eval/agreement.py',
        '    if not 1.0 <= p <= 2.0 or p == 1.5:',
        '    if not 1.0 < p <= 2.0 or p == 1.5:',
        ['tests/test_agreement.py']),
    'agreement_exact_tie_counts_nothing': (
        'solm/eval/agreement.py',
        '        if p2 == 0.5:\n            agree += 0.5',
        '        if p2 == 0.5:\n            agree += 0',
        ['tests/test_agreement.py']),
    'tip_rules_step_needed_now_counts_free': (
        'solm/annotate/tip_rules.py',
        '            free = [r for r in holder if needed[holder[r]] < j]',
        '            free = [r for r in holder if needed[holder[r]] <= j]',
        ['tests/test_tip_annotate.py']),
    'tip_rules_step_needs_more_than_the_minimum': (
        'solm/annotate/tip_rules.py',
        '        if count(current) >= min_step_tokens:\n            steps.append(current)',
        '        if count(current) > min_step_tokens:\n            steps.append(current)',
        ['tests/test_tip_annotate.py']),
    'math_first_box_taken': (
        'solm/core/math_task.py',
        '    start = starts[-1]',
        '    start = starts[0]',
        ['tests/test_math_task.py']),
    'math_negative_decimal_integer_lost': (
        'solm/core/math_task.py',
        '    m = re.fullmatch(r"(-?\\d+)\\.0+", s)',
        '    m = re.fullmatch(r"(\\d+)\\.0+", s)',
        ['tests/test_math_task.py']),
    'grpo_rollouts_share_one_seed': (
        'solm/train/grpo.py',
        '        reqs = [TipRequest(i, p, seed=offset + i) for i, p in enumerate(ids)]',
        '        reqs = [TipRequest(i, p, seed=0) for i, p in enumerate(ids)]',
        ['tests/test_tip_grpo.py']),
    'grpo_logprobs_ignore_temperature': (
        'solm/train/grpo.py',
        '    logits = logits[:, prompt_cols - 1:-1].float() / temperature',
        '    logits = logits[:, prompt_cols - 1:-1].float()',
        ['tests/test_tip_grpo.py']),
    'tip_eval_accuracy_divided_by_samples': (
        'solm/eval/tip_eval.py',
        '        accuracy = sum(sum(v) / len(v) for v in by_problem.values()) / len(by_problem)',
        '        accuracy = sum(sum(v) / len(v) for v in by_problem.values()) / len(rs)',
        ['tests/test_tip_eval.py']),
    'tip_eval_256_is_not_long': (
        'solm/eval/tip_eval.py',
        '        long_rows = [r for r in rs if r["generated"] >= 256]',
        '        long_rows = [r for r in rs if r["generated"] > 256]',
        ['tests/test_tip_eval.py']),
    'tip_eval_seed_by_job_order': (
        'solm/eval/tip_eval.py',
        '    jobs = [Job(i, Record(p["id"], p["prompt"]), prompts[p["id"]], k)',
        '    jobs = [Job(i, Record(p["id"], p["prompt"]), prompts[p["id"]], i)',
        ['tests/test_tip_eval.py']),
    'tip_sft_first_trace_token_untrained': (
        'solm/train/tip_sft.py',
        '        for i in range(min(len(prompt) - 1, len(targets))):',
        '        for i in range(min(len(prompt), len(targets))):',
        ['tests/test_tip_sft.py']),
    'tip_sft_register_n_accepted': (
        'solm/train/tip_sft.py',
        '        beyond = [int(i) for i in _REGISTER.findall(text) if int(i) >= registers]',
        '        beyond = [int(i) for i in _REGISTER.findall(text) if int(i) > registers]',
        ['tests/test_tip_sft.py']),
    'pdiff_chunk_may_have_no_pad': (
        'solm/core/systems/pdiff.py',
        '        need = len(content) + 2 + 1 + extra',
        '        need = len(content) + 2 + extra',
        PDIFF_TESTS),
    'pdiff_chunk_slots_without_minimum': (
        'solm/core/systems/pdiff.py',
        '    return max(MIN_SLOTS, int(round(10 * tens * length_scale)))',
        '    return int(round(10 * tens * length_scale))',
        PDIFF_TESTS),
    'pdiff_sft_norm_counts_masked_only': (
        'solm/train/pdiff_sft.py',
        '        norm = sum(k == AR for k in kinds) + len(diffusable)',
        '        norm = sum(k == AR for k in kinds) + len(masked)',
        PDIFF_TESTS),
    'pdiff_sft_length_filter_fewest_pads': (
        'solm/train/pdiff_sft.py',
        '        extra = (lambda: self.extra_pads) if most else (lambda: rng.randint(0, self.extra_pads))',
        '        extra = (lambda: 0) if most else (lambda: rng.randint(0, self.extra_pads))',
        PDIFF_TESTS),
    'pdiff_continuation_cap_one_late': (
        'solm/decode/pdiff/runtime.py',
        '        if run.after_sync is not None and run.after_sync >= cfg.max_continuation:',
        '        if run.after_sync is not None and run.after_sync > cfg.max_continuation:',
        PDIFF_TESTS),
    "pdiff_chunk_sampling_ignores_the_seed": (
        'solm/decode/pdiff/runtime.py',
        'torch.tensor([j.run.req.config.sampling.seed for j in jobs for _ in j.masked],',
        'torch.tensor([1 for j in jobs for _ in j.masked],',
        ['tests/test_pdiff_structure.py', 'tests/test_pdiff_runtime.py', 'tests/test_pdiff_sft.py', 'tests/test_pdiff_eval.py']),
    'shard_merge_keeps_shard_order': (
        'solm/core/shard.py',
        '        rows = [by_id[i] for i in expected] + [r for r in existing',
        '        rows = list(by_id.values()) + [r for r in existing',
        ['tests/test_shard.py']),
    'shard_copies_a_file_only_some_shards_have': (
        'solm/core/shard.py',
        '        if not all(f.exists() for f in files) or len({f.read_bytes() for f in files}) > 1:',
        '        if not any(f.exists() for f in files) or len({f.read_bytes() for f in files if f.exists()}) > 1:',
        ['tests/test_shard.py']),
}

# The re-audit's fourth round: planted from the code alone after round 3's tests were added
# (`--audit4`).
AUDIT4: dict[str, tuple] = {
    'batched_cancelled_running_request_unflagged': (
        'solm/decode/pasta/batched.py',
        '                run.state.flags.add(CANCELLED)\n',
        '',
        ['tests/test_batched.py', 'tests/test_serve_settings.py', 'tests/test_serve.py', 'tests/test_serve_app.py', 'tests/test_serve_engine.py', 'tests/test_serve_tip.py']),
    'serve_a_request_at_the_cap_refused': (
        'solm/serve/app.py',
        '    if cap is not None and cap > d.max_new_tokens:',
        '    if cap is not None and cap >= d.max_new_tokens:',
        ['tests/test_serve_settings.py', 'tests/test_serve.py', 'tests/test_serve_app.py', 'tests/test_serve_engine.py', 'tests/test_serve_tip.py']),
    'prefs_realized_speedup_reads_the_critical_path': (
        'solm/prefs/job.py',
        '                     "realized_step_speedup": round(baseline_tokens\n                                                    / max(1, s["forward_passes"]), 4),',
        '                     "realized_step_speedup": round(baseline_tokens\n                                                    / max(1, s["critical_path"]), 4),',
        ['tests/test_prefs.py']),
    'bonbon_id_equal_to_the_vocabulary_size_passes': (
        'solm/train/bonbon.py',
        '            bad = next((t for t in row[side]["ids"] if t >= vocab_size), None)',
        '            bad = next((t for t in row[side]["ids"] if t > vocab_size), None)',
        ['tests/test_bonbon.py']),
    'agreement_wilson_centre_halved_wrongly': (
        'solm/eval/agreement.py',
        '    centre = p + z * z / (2 * n)',
        '    centre = p + z * z / n',
        ['tests/test_agreement.py']),
    'tip_rules_thousands_separator_kept': (
        'solm/annotate/tip_rules.py',
        '        number = m.group(1).replace(",", "")',
        '        number = m.group(1)',
        ['tests/test_tip_annotate.py']),
    'math_gsm8k_rows_not_integer': (
        'solm/core/math_task.py',
        '            or "####" in str(row.get("answer", "")))',
        '            or "####" in str(row.get("question", "")))',
        ['tests/test_math_task.py', 'tests/test_tip_eval.py']),
    'grpo_kv_term_unclamped_above': (
        'solm/train/grpo.py',
        '    return min(1.0, max(0.0, live_response_tokens / max_completion_length))',
        '    return max(0.0, live_response_tokens / max_completion_length)',
        ['tests/test_tip_grpo.py']),
    'tip_eval_killed_share_over_samples': (
        'solm/eval/tip_eval.py',
        '            "share_steps_killed": round(sum(r["steps_killed"] for r in rs) / steps, 4)',
        '            "share_steps_killed": round(sum(r["steps_killed"] for r in rs) / n, 4)',
        ['tests/test_tip_eval.py']),
    'tip_sft_reuse_count_reads_eval_rows': (
        'solm/train/tip_sft.py',
        '        killed = sum(1 for r in split.train',
        '        killed = sum(1 for r in split.eval',
        ['tests/test_tip_sft.py']),
    'pdiff_closing_tag_diffusable': (
        'solm/core/systems/pdiff.py',
        '    return [a.thread != MAIN and int(t) not in (vocab.async_open, vocab.async_close)',
        '    return [a.thread != MAIN and int(t) not in (vocab.async_open,)',
        PDIFF_TESTS),
    'pdiff_sft_masking_rate_can_pass_one': (
        'solm/train/pdiff_sft.py',
        '    t = (1 - eps) * rng.random() + eps',
        '    t = rng.random() + eps',
        PDIFF_TESTS),
    'pdiff_last_step_leaves_slots_masked': (
        'solm/decode/pdiff/runtime.py',
        '        k = len(masked) if left <= 1 else math.ceil(len(masked) / left)',
        '        k = len(masked) if left < 1 else math.ceil(len(masked) / left)',
        PDIFF_TESTS),
    'shard_last_shard_missing_unnoticed': (
        'solm/core/shard.py',
        '    missing = [k for k in range(count) if k not in found]',
        '    missing = [k for k in range(count - 1) if k not in found]',
        ['tests/test_shard.py']),
    'jobs_resume_ignores_the_sample': (
        'solm/decode/jobs.py',
        '            key = (str(rec.id), k) if per_sample else str(rec.id)',
        '            key = str(rec.id)',
        ['tests/test_tip_cli.py', 'tests/test_prefs.py', 'tests/test_toy_decode_system.py']),
    'rerun_defaults_override_the_record': (
        'solm/core/provenance.py',
        '    implied = {**_scrub(defaults or {}), **recorded}',
        '    implied = {**recorded, **_scrub(defaults or {})}',
        ['tests/test_toy_decode_system.py', 'tests/test_cli.py', 'tests/test_tip_cli.py']),
}

# once caught (tests were added for the ones each round missed: 5 of 22 in round 1, 4 of 12
# in round 2, 10 of 29 in round 3, 5 of 15 in round 4), they join the list the plain run must catch
# re-audit round 5: planted from the code alone, before reading the tests
AUDIT5: dict[str, tuple] = {
    'summary_passes_gain_inverted': (
        'solm/eval/summary.py',
        '                passes_gain.append(bp / mp)',
        '                passes_gain.append(mp / bp)',
        ['tests/test_eval_run.py', 'tests/test_pdiff_eval.py', 'tests/test_repro_report.py', 'tests/test_pasta_bench.py', 'tests/test_toy_decode_system.py', 'tests/test_shard.py']),
    'summary_distrusts_without_its_margin': (
        'solm/eval/summary.py',
        '            distrusted += realized[-1] > DISTRUST * theoretical[-1]',
        '            distrusted += realized[-1] > theoretical[-1]',
        ['tests/test_eval_run.py', 'tests/test_pdiff_eval.py', 'tests/test_repro_report.py', 'tests/test_pasta_bench.py', 'tests/test_toy_decode_system.py', 'tests/test_shard.py']),
    'chunk_pad_share_counts_tag_slots': (
        'solm/eval/summary.py',
        '                                        / max(sum(c["slots"] - 2 for c in chunks), 1), 4)',
        '                                        / max(sum(c["slots"] for c in chunks), 1), 4)',
        ['tests/test_eval_run.py', 'tests/test_pdiff_eval.py', 'tests/test_repro_report.py', 'tests/test_pasta_bench.py', 'tests/test_toy_decode_system.py', 'tests/test_shard.py']),
    'summary_throughput_over_untimed_rows': (
        'solm/eval/summary.py',
        '        wall = 0  # some rows untimed: no throughput figure',
        '        pass  # some rows untimed: no throughput figure',
        ['tests/test_eval_run.py', 'tests/test_pdiff_eval.py', 'tests/test_repro_report.py', 'tests/test_pasta_bench.py', 'tests/test_toy_decode_system.py', 'tests/test_shard.py']),
    'geomean_floor_drops_values': (
        'solm/core/stats.py',
        '        values = [max(v, floor) for v in values]',
        '        values = [v for v in values if v >= floor]',
        ['tests/test_batched.py', 'tests/test_eval_run.py', 'tests/test_pasta_format.py', 'tests/test_pdiff_eval.py', 'tests/test_repro_report.py']),
    'judge_orders_combined_wrong': (
        'solm/judge/verdict.py',
        '    return (p1_first + 1.0 - p2_first) / 2.0',
        '    return (p1_first + p2_first) / 2.0',
        ['tests/test_judge.py', 'tests/test_agreement.py', 'tests/test_prefs.py']),
    'judge_confidence_floor_zero': (
        'solm/judge/verdict.py',
        '    confidence = min(1.0, max(0.5, confidence)) if math.isfinite(confidence) else 1.0',
        '    confidence = min(1.0, max(0.0, confidence)) if math.isfinite(confidence) else 1.0',
        ['tests/test_judge.py', 'tests/test_agreement.py']),
    'streamingllm_window_ignores_sinks': (
        'solm/decode/tip/policies.py',
        '        return max(1, (self.budget - self.sinks) // self.page_size)',
        '        return max(1, self.budget // self.page_size)',
        ['tests/test_policies.py', 'tests/test_toy_policy.py', 'tests/test_policy_oracles.py', 'tests/test_tip_runtime.py', 'tests/test_tip_eval.py', 'tests/test_tip_cli.py']),
    'streamingllm_shows_the_whole_sink_page': (
        'solm/decode/tip/policies.py',
        '        return [(first, min(self.sinks, len(first.tokens)))] + [(p, len(p.tokens)) for p in rest]',
        '        return [(first, len(first.tokens))] + [(p, len(p.tokens)) for p in rest]',
        ['tests/test_policies.py', 'tests/test_toy_policy.py', 'tests/test_policy_oracles.py', 'tests/test_tip_runtime.py', 'tests/test_tip_eval.py', 'tests/test_tip_cli.py']),
    'shard_takes_shifted_positions': (
        'solm/core/shard.py',
        '        return [x for i, x in enumerate(items) if i % self.count == self.index]',
        '        return [x for i, x in enumerate(items) if (i + 1) % self.count == self.index]',
        ['tests/test_shard.py', 'tests/test_tip_cli.py', 'tests/test_toy_decode_system.py']),
    'decode_samples_share_one_index': (
        'solm/decode/jobs.py',
        '            jobs.append(Job(len(jobs), rec, ids, k))',
        '            jobs.append(Job(len(jobs), rec, ids, 0))',
        ['tests/test_tip_cli.py', 'tests/test_prefs.py', 'tests/test_golden_outputs.py', 'tests/test_toy_decode_system.py', 'tests/test_shard.py', 'tests/test_eval_run.py']),
    'decode_resume_ignores_the_sample': (
        'solm/decode/jobs.py',
        '    return (str(row["id"]), int(row.get("sample", 0))) if per_sample else str(row["id"])',
        '    return (str(row["id"]), 0) if per_sample else str(row["id"])',
        ['tests/test_tip_cli.py', 'tests/test_prefs.py', 'tests/test_golden_outputs.py', 'tests/test_toy_decode_system.py', 'tests/test_shard.py', 'tests/test_eval_run.py']),
    'tip_kill_share_per_sample': (
        'solm/eval/tip_eval.py',
        '            "share_steps_killed": round(sum(r["steps_killed"] for r in rs) / steps, 4)',
        '            "share_steps_killed": round(sum(r["steps_killed"] for r in rs) / n, 4)',
        ['tests/test_tip_eval.py', 'tests/test_cli_input_checks.py', 'tests/test_shard.py']),
    'format_parallelism_counts_content_only': (
        'solm/decode/pasta/format_stats.py',
        '        return r.get("total_tokens", r["content_tokens"]) / max(1, r["critical_path"])',
        '        return r["content_tokens"] / max(1, r["critical_path"])',
        ['tests/test_pasta_format.py', 'tests/test_batched.py', 'tests/test_cli_validation.py']),
    'decode_summary_flag_counts_stick_at_one': (
        'solm/decode/jobs.py',
        '            self.flagged[f] = self.flagged.get(f, 0) + 1',
        '            self.flagged[f] = 1',
        ['tests/test_tip_cli.py', 'tests/test_prefs.py', 'tests/test_golden_outputs.py', 'tests/test_toy_decode_system.py', 'tests/test_shard.py', 'tests/test_eval_run.py']),
}


# the paper path without a GPU (flex, FSDP2, architectures, remote code, bf16)
PAPER_PATH: dict[str, tuple] = {
    "bonbon_hands_a_flex_model_a_dense_mask": (
        "solm/train/bonbon.py", "                              self.eos_id, self.pad_id, self.flex)",
        "                              self.eos_id, self.pad_id, False)",
        ["tests/test_flex_everywhere.py"]),
    "grpo_hands_a_flex_model_a_dense_mask": (
        "solm/train/grpo.py",
        "    mask = structure_mask(model, tip_visible if tip else causal, attrs, real, device)",
        "    from solm.train.flex import dense_batch_mask\n"
        "    mask = dense_batch_mask(tip_visible if tip else causal, attrs, real).to(device)",
        ["tests/test_tip_grpo.py"]),
    "flex_batches_not_bucketed": (
        "solm/train/flex.py", "    return -(-blocks // step) * step * BLOCK",
        "    return n", ["tests/test_flex_everywhere.py", "tests/test_flex_training.py"]),
    "flex_mask_lets_real_queries_see_padding": (
        "solm/train/flex.py",
        "        return (real_q & real_k & term(q, k)) | (~real_q & (q_idx == kv_idx))",
        "        return (real_q & term(q, k)) | (~real_q & (q_idx == kv_idx))",
        ["tests/test_flex_everywhere.py", "tests/test_flex_training.py"]),
    "flex_model_takes_dense_masks_silently": (
        "solm/train/flex.py", "        if isinstance(mask, torch.Tensor) and mask.dim() == 4:\n"
        "            from solm.core.errors import SolmError\n            raise SolmError(\"a dense",
        "        if isinstance(mask, torch.Tensor) and mask.dim() == 5:\n"
        "            from solm.core.errors import SolmError\n            raise SolmError(\"a dense",
        ["tests/test_flex_everywhere.py"]),
    "rollouts_bypass_the_fsdp_root": (
        "solm/train/grpo.py", "root_unsharded(trainer.model):", "contextlib.nullcontext():",
        ["tests/test_grpo_fsdp.py"]),
    "control_scale_keeps_stale_weights": (
        "solm/train/callbacks.py",
        "        for w in self.weights(model if model is not None else self.model):",
        "        for w in self.__dict__.setdefault('_first', self.weights(self.model)):",
        ["tests/test_control_token_lr_sharded.py", "tests/test_sft.py"]),
    "control_scale_ignores_the_shard_offset": (
        "solm/train/callbacks.py",
        "        mine = ids[(ids >= start) & (ids < start + shape[0])] - start",
        "        mine = ids[ids < shape[0]]", ["tests/test_control_token_lr_sharded.py"]),
    "rollouts_in_fp32_under_bf16": (
        "solm/train/grpo.py", "with trainer.accelerator.autocast(), root_unsharded",
        "with contextlib.nullcontext(), root_unsharded", ["tests/test_tip_grpo.py"]),
    "head_packs_under_autocast": (
        "solm/engines/torch/head.py",
        "                and not torch.is_autocast_enabled(hidden.device.type)):",
        "                ):", ["tests/test_tip_grpo.py"]),
    "kernels_ignore_the_softcap": (
        "solm/engines/torch/attention.py", "    if not softcap:\n        return F.scaled_dot",
        "    if True:\n        return F.scaled_dot", ["tests/test_architectures.py"]),
    "paged_kernel_ignores_the_softcap": (
        "solm/engines/torch/paged_attention.py", "            o = attend(qi, k, v, mask, scale, softcap)",
        "            o = attend(qi, k, v, mask, scale, None)", ["tests/test_architectures.py"]),
    "a_binding_sliding_window_decodes": (
        "solm/core/model_features.py", "    if window is None or tokens <= window:",
        "    if True:", ["tests/test_architectures.py", "tests/test_check_model.py"]),
    "untrusted_code_runs": (
        "solm/core/models.py", "            path, dtype=torch_dtype, attn_implementation="
        "attn_implementation,\n            trust_remote_code=trusts_remote_code(), "
        "use_kernels=False)\n    except",
        "            path, dtype=torch_dtype, attn_implementation="
        "attn_implementation,\n            trust_remote_code=True, use_kernels=False)\n    except",
        ["tests/test_trust_remote_code.py"]),
    "grpo_rollouts_seeded_by_local_index": (
        "solm/train/grpo.py", "TipRequest(i, p, seed=offset + i)", "TipRequest(i, p, seed=i)",
        ["tests/test_tip_grpo.py"]),
    "pdiff_masks_by_collation_order": (
        "solm/train/pdiff_sft.py",
        "            examples.append(self.encode(r, random.Random(zlib.crc32(key.encode()))))",
        "            examples.append(self.encode(r, random.Random(zlib.crc32(key.encode()))\n"
        "                                        if r.get('held_out') else None))",
        ["tests/test_ddp_training.py::test_two_processes_end_where_one_does[command0]"]),
    "grpo_pool_sized_by_tokens_not_steps": (
        "solm/decode/tip/runtime.py", "    partial = registers + 2 if fresh_page_per_step else 1",
        "    partial = 2", ["tests/test_tip_grpo.py"]),
    "fsdp_save_keeps_tied_copies": (
        "solm/train/base.py", "            extra[\"state_dict\"] = without_tied_copies(state_dict, final)",
        "            extra[\"state_dict\"] = state_dict",
        ["tests/test_ddp_training.py::test_fsdp2_processes_shard_train_save_and_resume_as_one"]),
    "fsdp_save_on_rank_0_alone": (
        "solm/train/base.py", "                      if getattr(trainer, \"is_fsdp_enabled\", False) else None)",
        "                      if False else None)",
        ["tests/test_ddp_training.py::test_fsdp2_processes_shard_train_save_and_resume_as_one"]),
    "grpo_rollouts_seeded_by_call_count": (
        "solm/train/grpo.py", "        if step is None:  # no trainer state (called on its own): one draw per call",
        "        if True:", ["tests/test_tip_grpo.py"]),
    "grpo_prompt_order_not_reseeded_per_epoch": (
        "solm/train/grpo.py", "        sampler.generator.manual_seed(base + epoch)",
        "        pass", ["tests/test_tip_grpo.py"]),
    "check_model_ignores_unsupported_features": (
        "solm/decode/check_model.py", "        if refused:", "        if False:",
        ["tests/test_check_model.py"]),
}
GAIN_TESTS = ["tests/test_annotation_gain.py", "tests/test_rules.py"]
SPEED_SHAPE: dict[str, tuple] = {
    "speed_groups_never_left_plain": (
        "solm/annotate/rules.py", "if self.gain_of is not None and self.gain_of(group) <= 1.0:",
        "if self.gain_of is not None and self.gain_of(group) < 0.0:", GAIN_TESTS),
    "speed_header_stays_in_main": (
        "solm/annotate/rules.py", "        if shape.head_in_block:\n",
        "        if False:\n", GAIN_TESTS),
    "mix_trains_on_eval_prompts": (
        "solm/annotate/mix.py", "            if banned and prompt_key(",
        "            if False and prompt_key(", GAIN_TESTS),
    "gain_counts_topic_as_content": (
        "solm/annotate/gain.py",
        "        return pasta_metrics(text_ids(tok, annotated), vocab).content_speedup",
        "        m = pasta_metrics(text_ids(tok, annotated), vocab)\n"
        "        return (m.content_tokens + m.promises) / m.critical_path", GAIN_TESTS),
    "mix_keeps_rows_below_min_gain": (
        "solm/annotate/mix.py", "                if min_gain is not None and gain < min_gain:",
        "                if min_gain is not None and gain < 0:", GAIN_TESTS),
}
# the rules llama.cpp needed, and the engine's sequence bookkeeping
LLAMA_TESTS = ["tests/test_llamacpp.py"]
LLAMA_RULES = {
    "overlap_sync_does_not_pass_its_blocks": (
        "solm/core/systems/pasta.py",
        "                self.main_pos = max([self.main_pos, *joined])",
        "                pass", ["tests/test_oracles.py", "tests/test_runtime.py"]),
    "overlap_fork_attrs_after_main": (
        "solm/decode/pasta/runtime.py",
        "        fork_attrs = [tracker.fork(th.tid, th.pending) for th in active]\n"
        "        if feed_main:",
        "        fork_attrs = None\n        if feed_main:",
        ["tests/test_runtime.py"]),
    "tip_newest_step_killed_at_once": (
        "solm/core/systems/tip.py", "newest = killed == self.step", "newest = False",
        ["tests/test_oracles.py", *LLAMA_TESTS]),
    "llama_fork_misses_its_promise": (
        "solm/engines/llamacpp/step.py",
        "seq, extra = req.main, tuple(also.pop(int(columns[\"order\"][i]), ()))",
        "seq, extra = req.main, (); also.pop(int(columns[\"order\"][i]), ())", LLAMA_TESTS),
    "llama_compaction_loses_the_kv": (
        "solm/engines/llamacpp/binding.py",
        "        if L.llama_state_seq_set_data(self.ctx, blob, size, seq) == 0:",
        "        if False:", LLAMA_TESTS),
    "llama_compaction_miscounts_holes": (
        "solm/engines/llamacpp/tip.py", "            span, holes = held, 0",
        "            span, holes = held, holes", LLAMA_TESTS),
    "llama_sync_joins_nothing": (
        "solm/engines/llamacpp/step.py", "                self.ctx.seq_cp(seq, req.main)\n",
        "                pass\n", LLAMA_TESTS),
    "llama_chunks_causal": (
        "solm/engines/llamacpp/step.py", "            self.ctx.set_causal(False)\n",
        "            pass\n", LLAMA_TESTS),
    "llama_tip_never_removes": (
        "solm/engines/llamacpp/tip.py",
        "                self.ctx.seq_rm(seq, page.tokens[keep], page.tokens[n_held - 1] + 1)",
        "                pass", LLAMA_TESTS),
    "llama_streaming_one_page_allowed": (
        "solm/engines/llamacpp/tip.py", "if recent is not None and recent() < 2:",
        "if recent is not None and recent() < 1:", LLAMA_TESTS),
    "auto_ignores_the_refusal": (
        "solm/engines/__init__.py",
        "        why = None if missing else engine.refusal(system, **facts)",
        "        why = None", ["tests/test_engine_seam.py", "tests/test_cli_validation.py"]),
    "explicit_engine_ignores_the_refusal": (
        "solm/engines/__init__.py",
        "        why = engine.refusal(system, **facts)\n        if why:",
        "        why = None\n        if why:", ["tests/test_engine_seam.py", "tests/test_cli_validation.py"]),
    "tip_refusal_dropped": (
        "solm/engines/llamacpp/engine.py",
        "        check = {\"pasta\": _pasta_refusal, \"pdiff\": _pdiff_refusal,\n                 \"tip\": _tip_refusal}.get(system)",
        "        check = {\"pasta\": _pasta_refusal, \"pdiff\": _pdiff_refusal}.get(system)",
        ["tests/test_engine_seam.py"] + LLAMA_TESTS),
    "llama_sot_point_without_its_prefix": (
        "solm/engines/llamacpp/step.py",
        "                    self.ctx.seq_cp(req.main, seq)\n                    if promised:",
        "                    if promised:\n                        self.ctx.seq_cp(req.main, seq)"
        "\n                    if promised:", LLAMA_TESTS),
    "tip_bench_runs_refused_policies_on_llama": (
        "solm/eval/tip_bench.py", "[n for n in policies if n not in refused], refused))",
        "list(policies), refused))", LLAMA_TESTS),
    # the seam gives each system its step, and the refusals hold
    "pdiff_given_the_slots_step": (
        "solm/decode/pdiff/system.py", 'step("pdiff", engine,', 'step("slots", engine,',
        ["tests/test_engine_matrix.py"]),
    "tip_runs_on_torch_whatever_the_engine": (
        "solm/decode/tip/system.py", "    kv = engine_kv(engine, config)\n",
        "    kv = engine_kv(engine, config) and None\n", ["tests/test_engine_matrix.py"]),
    "pasta_pred10x_refusal_dropped": (
        "solm/engines/llamacpp/engine.py",
        '    if parallel and model_positions(model) != "overlap":',
        "    if False:", ["tests/test_engine_matrix.py"]),
    "auto_takes_the_slowest_measured_engine": (
        "solm/engines/cost.py", "best = max(rates, key=rates.get)",
        "best = min(rates, key=rates.get)", ["tests/test_engine_seam.py"]),
    "auto_ignores_the_tokens_per_pass": (
        "solm/engines/cost.py", "rates[name] = max(content / pass_ms(e[\"ms\"], max(1.0, fed))",
        "rates[name] = max(content / pass_ms(e[\"ms\"], 1.0)", ["tests/test_engine_seam.py"]),
    "flash_kept_if_any_format_wins": (
        "solm/engines/cost.py", "    on = all(sum(f.values()) < sum(o.values()) and f[min(f, key=int)] < o[min(o, key=int)]\n             for o, f in pairs)",
        "    on = any(sum(f.values()) < sum(o.values()) and f[min(f, key=int)] < o[min(o, key=int)]\n             for o, f in pairs)",
        ["tests/test_bench_step.py"]),
    "flash_setting_not_passed_to_contexts": (
        "solm/engines/llamacpp/engine.py", "unified=not independent,\n                            flash_attn_faster=flash_attn_here())",
        "unified=not independent)", ["tests/test_bench_step.py"]),
    "sot_batched_runtime_drops_the_engines_step": (
        'solm/decode/sot/system.py',
        'max_batch=batch, forward=forward,',
        'max_batch=batch,',
        ['tests/test_engine_matrix.py']),
    "distill_continuation_forgets_its_written_tokens": (
        'solm/decode/pasta/runtime.py',
        'history = [*self.written, *thread.fed] if self.written else thread.fed',
        'history = thread.fed',
        ['tests/test_own_answers.py']),
    "distill_continues_from_the_prompt_alone": (
        "solm/prefs/distill_job.py", "return BatchRequest(job.rid, [*job.prompt_ids, *written], config,",
        "return BatchRequest(job.rid, list(job.prompt_ids), config,", ["tests/test_own_answers.py"]),
    "models_load_hub_kernels": (
        "solm/core/models.py", "trust_remote_code=trusts_remote_code(), use_kernels=False)\n    except ValueError",
        "trust_remote_code=trusts_remote_code())\n    except ValueError", ["tests/test_models.py"]),
    "auto_sizes_a_pass_by_its_content_tokens": (
        "solm/engines/cost.py", "rates[name] = max(content / pass_ms(e[\"ms\"], max(1.0, fed)) for e in rows)",
        "rates[name] = max(content / pass_ms(e[\"ms\"], max(1.0, content)) for e in rows)",
        ["tests/test_engine_seam.py"]),
    "close_nudge_ramp_starts_a_token_late": (
        "solm/decode/pasta/guards.py", "return nudge * (content_tokens - n + 1) / (slack(n) + 1)",
        "return nudge * (content_tokens - n) / (slack(n) + 1)", ["tests/test_runtime.py"]),
    "prefs_guard_share_unweighted": (
        "solm/prefs/job.py", "penalty += guard_weight * guarded_share(s)",
        "penalty += guarded_share(s)", ["tests/test_prefs.py"]),
    "prefs_weights_in_the_folder_identity": (
        "solm/cli/pasta_prefs.py", '"dtype": dtype, **{k: v for k, v in decoding.values.items()},',
        '"dtype": dtype, "repeat_weight": repeat_weight, **{k: v for k, v in decoding.values.items()},',
        ["tests/test_prefs.py::test_a_rerun_with_other_weights_rescores_the_samples_it_has"]),
    "delta_keeps_the_smallest_directions": (
        "solm/core/adapter_packing.py", "return (u[:, :r] * sv[:r]).contiguous(), vh[:r].contiguous()",
        "return (u[:, -r:] * sv[-r:]).contiguous(), vh[-r:].contiguous()",
        ["tests/test_delta_packing.py"]),
    "delta_norm_difference_dropped": (
        "solm/core/delta_packing.py", "out[name] = b + stored[name + _VEC].float()",
        "out[name] = b", ["tests/test_delta_packing.py"]),
    "packed_folder_by_path_loaded_raw": (
        "solm/core/models.py", "return _unpacked_copy(folder, folder.name) if folder.is_dir() else None",
        "return None", ["tests/test_delta_packing.py"]),
    "models_listing_misses_differences": (
        "solm/core/models.py",
        '    if is_delta_folder(folder) and shard_files(folder):\n        return (f"difference',
        '    if False:\n        return (f"difference', ["tests/test_models.py"]),
    "widths_ms_by_max_not_median": (
        "bench/pasta_vs_llamacpp.py", "return {w: statistics.median(v) for w, v in sorted(by.items())}",
        "return {w: max(v) for w, v in sorted(by.items())}",
        ["tests/test_bench_pasta_vs_llamacpp.py"]),
    "probe_threads_miss_the_shared_context": (
        "solm/engines/llamacpp/engine.py", "        for s in range(1, k_max):\n            self.ctx.seq_cp(0, s)",
        "        for s in range(2, k_max):\n            self.ctx.seq_cp(0, s)",
        ["tests/test_bench_step.py"]),
    "f32_takes_flash_attention": (
        "solm/engines/llamacpp/model.py", 'return faster and kv_type(engine) != "f32"',
        "return faster", ["tests/test_llamacpp.py", "tests/test_bench_step.py"]),
    "pass_widths_count_the_prefill": (
        "bench/pasta_vs_llamacpp.py", "        if not prefill:\n            self.widths.append",
        "        if True:\n            self.widths.append", ["tests/test_bench_pasta_vs_llamacpp.py"]),
    "kept_difference_timed_as_itself": (
        "solm/engines/cost.py", "    base = packed_base(str(model))", "    base = None",
        ["tests/test_engine_seam.py"]),
    "own_loop_skips_a_position": (
        "solm/engines/llamacpp/own_loop.py", "len(ids) + step, 1", "len(ids) + step + 1, 1",
        LLAMA_TESTS),
    "chat_ignores_the_engine": (
        "solm/cli/pasta_chat.py", 'rt, settings = runtime_on_engine(model, "parallel", options["engine"],',
        'rt, settings = runtime_on_engine(model, "parallel", "torch",', LLAMA_TESTS),
    "gguf_rotary_not_permuted": (
        "solm/engines/llamacpp/export.py",
        "array = torch.from_numpy(_permute_rotary(tensor.float().cpu().numpy(), n_head))",
        "array = tensor", LLAMA_TESTS),
}
# the trial's planted bugs the tests missed, and each trust follow-up's rule
CLI_PIPES = "tests/test_cli_pipes.py"
NEW_USER = {
    "export_quantizable_written_unquantized": (
        "solm/engines/llamacpp/export.py", "if outtype in _BLOCKED and data.shape[-1] % 32:",
        "if outtype in _BLOCKED and not data.shape[-1] % 32:",
        ["tests/test_llamacpp.py::test_every_matrix_is_written_in_the_requested_type"]),
    "llama_shared_prompt_not_given": (
        "solm/engines/llamacpp/step.py",
        "                self.ctx.seq_cp(self._requests[writer].main, req.main)",
        "                pass",
        ["tests/test_llamacpp.py::test_samples_sharing_a_prompt_compute_what_the_prompt_alone_does"]),
    "demo_theoretical_counts_tags": (
        "solm/decode/pasta/demo.py",
        "theoretical_speedup=pasta_metrics(decoded.ids, rt.vocab,\n"
        "                                                        attrs).content_speedup,",
        "theoretical_speedup=len(decoded.ids) / max(1, parallel.forward_passes),",
        ["tests/test_demo.py"]),
    "bench_warms_the_first_row_only": (
        "solm/eval/pasta_bench.py",
        'row = max(rows, key=lambda r: len(text_ids(tok, strip(r["annotated"]))))',
        "row = rows[0]", ["tests/test_pasta_bench.py"]),
    "bench_efficiency_never_flagged": (
        "solm/eval/pasta_bench.py",
        '"efficiency_flagged": geomean([r.efficiency for r in rows]) > DISTRUST,',
        '"efficiency_flagged": False,', ["tests/test_pasta_bench.py"]),
    "decode_settings_written_at_the_end_only": (
        "solm/cli/decode_command.py", "    if not to_stdout:\n        # the settings",
        "    if False:\n        # the settings", [CLI_PIPES]),
    "never_fitting_prompt_aborts_the_file": (
        "solm/decode/jobs.py",
        "                notice(f\"prompt {job.record.id!r} refused, the others go on: "
        "{done.error}\")\n                continue",
        "                raise RuntimeError(done.error)", [CLI_PIPES]),
    "finished_output_loads_the_model": (
        "solm/cli/decode_command.py", "        if not left:  # a finished output",
        "        if False:  # a finished output", [CLI_PIPES]),
    "bom_kept": (
        "solm/core/jsonl.py", "        if number == 1 and raw.startswith(BOM):",
        "        if False:", ["tests/test_jsonl.py"]),
    "merge_in_shard_order": (
        "solm/core/shard.py", "    rank = _prompt_order(files)\n", "    rank = None\n",
        ["tests/test_shard.py"]),
    "gguf_type_ignored_on_torch": (
        "solm/cli/flags.py", "        refuse_other_engines_settings(kwargs)\n", "",
        ["tests/test_cli_validation.py"]),
    "tip_server_greedy_by_default": (
        "solm/cli/serve.py", "                              chosen.command_defaults)",
        "                              {})", ["tests/test_cli_validation.py"]),
    "tip_server_checks_after_loading": (
        "solm/cli/serve.py",
        "    check_engine(chosen, model, opts, decoding)  # a refusal before anything loads\n",
        "", ["tests/test_cli_validation.py"]),
    "open_range_error_says_greater_than": (
        "solm/cli/checks.py", 'raise typer.BadParameter(f"must be {rule}, got {value:g}")',
        'raise typer.BadParameter(f"must be > {above:g}, got {value:g}")',
        ["tests/test_cli_validation.py"]),
    "export_replaces_an_existing_file": (
        "solm/cli/export.py", "    if out.exists() and not replace:",
        "    if False:",
        ["tests/test_llamacpp.py::test_export_refuses_unwritable_or_existing_outputs_before_loading"]),
    "f32_export_gets_f16_kv": (
        "solm/engines/llamacpp/model.py", 'return "f32" if engine.gguf_type == "f32" else "f16"',
        'return "f16"', ["tests/test_llamacpp.py::test_the_llama_contexts_kv_type_follows_the_export"]),
    "check_engines_gap_one_row_early": (
        "solm/eval/engine_check.py", "    row = oracle[at]\n", "    row = oracle[at - 1]\n",
        ["tests/test_llamacpp.py::test_check_engines_judges_a_divergence_by_the_oracles_gap"]),
    "demo_spread_never_unreliable": (
        "solm/decode/pasta/demo.py", "return any(v > WANDER for v in self.spread.values())",
        "return any(v > 10 * WANDER for v in self.spread.values())", ["tests/test_demo.py"]),
    "base_model_hint_for_every_model": (
        "solm/core/models.py",
        'return info.get("system") or info.get("control_tokens") or None',
        "return None", [CLI_PIPES]),
    "cli_start_imports_the_attention_interface": (
        "solm/engines/torch/attention.py", "import torch.nn.functional as F\n",
        "import torch.nn.functional as F\nfrom transformers import AttentionInterface\n",
        [CLI_PIPES]),
    "library_warnings_shown": (
        "solm/cli/console.py", "\n\nsilence_library_deprecations()\n", "\n\n", [CLI_PIPES]),
}
# the own ten, planted in the last wave's modules (the llama.cpp engine, the decode
# loop, sharding, manifests, the demo, the CLI guards) after its tests were written, each
# against its area's whole test files (`--audit6`); the caught ones then join the table
AUDIT6 = {
    "llama_join_one_epoch_late": (
        "solm/engines/llamacpp/step.py", "            if join <= epoch:", "            if join < epoch:",
        LLAMA_TESTS),
    "llama_every_prompt_token_returns_logits": (
        "solm/engines/llamacpp/step.py", "logits=not prefill or i == at + count - 1, also=extra))",
        "logits=True, also=extra))", LLAMA_TESTS),
    # planted first as the key without the type: equivalent (the file name carries the
    # type), so the registers instead, which nothing else in the path tells apart
    "gguf_cache_key_ignores_the_registers": (
        "solm/engines/llamacpp/model.py", "registers=num_registers, outtype=outtype,",
        "outtype=outtype,", [*LLAMA_TESTS, "tests/test_output_guards.py"]),
    "shard_marker_complete_unchecked": (
        "solm/core/shard.py", '    if not marker.get("complete"):', "    if False:",
        ["tests/test_shard.py"]),
    "rerun_check_ignores_new_settings": (
        "solm/core/provenance.py", "               if k in implied and implied[k] != v}",
        "               if k in recorded and implied[k] != v}",
        [CLI_PIPES, "tests/test_jobs.py", "tests/test_output_guards.py"]),
    "undone_counts_sample_zero_only": (
        "solm/decode/jobs.py", "    return sum((str(r.id), k) not in done if per_sample",
        "    return sum((str(r.id), 0) not in done if per_sample",
        [CLI_PIPES, "tests/test_jobs.py", "tests/test_tip_cli.py", "tests/test_output_guards.py"]),
    "demo_warm_up_dropped": (
        "solm/decode/pasta/demo.py",
        "    parallel_run(), sequential_run()  # warm both paths",
        "    pass  # warm both paths", ["tests/test_demo.py"]),
    "unwritable_folder_output_accepted": (
        "solm/core/paths.py",
        "        if path.is_dir():\n            raise SolmError(f\"{path}: is a folder; expected a",
        "        if False:\n            raise SolmError(f\"{path}: is a folder; expected a",
        ["tests/test_cli_input_checks.py", "tests/test_cli_validation.py",
         "tests/test_output_guards.py"]),
    "refused_rows_not_recorded": (
        "solm/decode/jobs.py",
        '                summary.refused.append({"id": str(job.record.id), "sample": job.sample,',
        '                [].append({"id": str(job.record.id), "sample": job.sample,', [CLI_PIPES]),
    "check_engines_diff_rows_shifted": (
        "solm/eval/engine_check.py",
        "            diff = float((other_logits[:rows].float() - oracle[1:rows + 1]).abs().max())",
        "            diff = float((other_logits[:rows].float() - oracle[:rows]).abs().max())",
        LLAMA_TESTS),
}
GUARD_TESTS = ["tests/test_pasta_guards.py"]
OWN_TESTS = ["tests/test_own_answers.py"]
OWN_ANSWERS = {
    "guard_slack_without_its_floor": (
        "solm/decode/pasta/guards.py", "    return max(MIN_SLACK, promised // 4)",
        "    return promised // 4", GUARD_TESTS),
    "guard_closes_one_token_late": (
        "solm/decode/pasta/guards.py", "    return content_tokens >= block_limit(tens)",
        "    return content_tokens > block_limit(tens)", GUARD_TESTS),
    "guard_repeats_one_run_late": (
        "solm/decode/pasta/guards.py", "    return seen >= times", "    return seen > times",
        GUARD_TESTS),
    "guard_block_forgets_its_promise": (
        "solm/decode/pasta/runtime.py", "                new_fork.promise = v.close_tens[tok]",
        "                new_fork.promise = None", GUARD_TESTS),
    "grammar_promise_cap_ignored": (
        "solm/decode/pasta/grammar.py",
        "        return self.main_full if promises_since_sync >= max_promises else self.main",
        "        return self.main", GUARD_TESTS),
    "own_unfaithful_annotation_kept": (
        "solm/annotate/own_answers.py", "    if n and training_content(annotated) == sampled:",
        "    if n:", OWN_TESTS),
    "own_repetition_threshold_inclusive": (
        "solm/annotate/own_answers.py",
        "    if repeated_ngram_share(ids, 3) > max_repeated_3grams:",
        "    if repeated_ngram_share(ids, 3) >= max_repeated_3grams:", OWN_TESTS),
    "own_plain_share_of_parallel_not_of_mix": (
        "solm/annotate/own_answers.py",
        "    want = round(len(mix.parallel) * rules.plain_share / (1 - rules.plain_share))",
        "    want = round(len(mix.parallel) * rules.plain_share)", OWN_TESTS),
    "own_tie_goes_to_the_sampled_answer": (
        "solm/annotate/own_answers.py", "    return max(eligible, key=lambda c: (c.gain, -c.sample))",
        "    return max(eligible, key=lambda c: (c.gain, c.sample))", OWN_TESTS),
    "own_evaluation_prompts_distilled": (
        "solm/cli/pasta_distill.py", "        if prompt_key(r.prompt) in banned:",
        "        if False:", OWN_TESTS),
    "promise_rounded_not_up": (
        "solm/annotate/rules.py", "    return max(1, min(MAX_PROMISE_TENS, -(-n_tokens // 10)))",
        "    return max(1, min(MAX_PROMISE_TENS, round(n_tokens / 10)))", ["tests/test_rules.py"]),
    "speed_item_space_left_in_main": (
        "solm/annotate/rules.py", "            keep = marker.end(2) if marker else 0",
        "            keep = marker.end() if marker else 0", OWN_TESTS),
    "pdiff_pads_after_end_skipped": (
        "solm/decode/pdiff/runtime.py", "        for j in [j for j in c.masked if j >= end]:",
        "        for j in [j for j in c.masked if j >= end + 2]:", ["tests/test_pdiff_runtime.py"]),
    "pdiff_all_pads_left_not_committed": (
        'solm/decode/pdiff/runtime.py',
        '    if cfg.pads_end_chunk and all(is_pad):',
        '    if False:',
        ['tests/test_pdiff_runtime.py']),
    "pdiff_tail_of_pads_not_committed": (
        'solm/decode/pdiff/runtime.py',
        '            self._trailing_pads(c, {masked[i] for i in range(len(masked)) if is_pad[i]})',
        '            pass',
        ['tests/test_pdiff_runtime.py']),
    "pdiff_tail_stops_at_predicted_pads": (
        "solm/decode/pdiff/runtime.py",
        "        while j >= 1 and (c.tokens[j] in pads or (j in c.masked and j in predicted_pads)):",
        "        while j >= 1 and c.tokens[j] in pads:", ["tests/test_pdiff_runtime.py"]),
    "pdiff_one_pad_not_the_cycle": (
        "solm/core/systems/pdiff.py", "                *[vocab.pad_for(k) for k in range(pads)], vocab.async_close]",
        "                *[vocab.pad] * pads, vocab.async_close]", ["tests/test_pdiff_structure.py"]),
    "pdiff_forced_pads_out_of_phase": (
        "solm/decode/pdiff/runtime.py", "            c.tokens[j] = self.vocab.pad_for(j - end)",
        "            c.tokens[j] = self.vocab.pad_for(j)", ["tests/test_pdiff_runtime.py"]),
    "pdiff_forced_pads_one_token": (
        "solm/decode/pdiff/runtime.py", "            c.tokens[j] = self.vocab.pad_for(j - end)",
        "            c.tokens[j] = self.vocab.pad", ["tests/test_pdiff_runtime.py"]),
    "pad_cycle_grows_old_models": (
        "solm/core/control_tokens.py",
        "    dropped = set(pad_cycle_tokens()[max(1, pad_cycle):])",
        "    dropped = set()", ["tests/test_pdiff_structure.py", "tests/test_pdiff_sft.py"]),
    "held_out_losses_mean_of_batch_means": (
        "solm/train/pdiff_sft.py", "                    acc[0] += parts[k] * n\n                    acc[1] += n",
        "                    acc[0] += parts[k]\n                    acc[1] += 1", ["tests/test_pdiff_sft.py"]),
    "eval_rows_drop_guarded_blocks": (
        "solm/decode/pasta/system.py", '''            "guarded_blocks", "wall_s", "prefill_s", "decode_s", "flags")''',
        '''            "wall_s", "prefill_s", "decode_s", "flags")''', ["tests/test_eval_run.py"]),
    "step_cost_warm_up_timed": (
        "solm/eval/step_cost.py", "            probe.one_pass(k)\n            times =",
        "            times =", ["tests/test_bench_step.py"]),
    "step_cost_llama_cells_kept": (
        "solm/engines/llamacpp/engine.py", "        for s in range(k):\n            self.ctx.seq_rm(s, c, -1)",
        "        for s in range(0):\n            self.ctx.seq_rm(s, c, -1)", ["tests/test_bench_step.py"]),
    "step_cost_torch_reads_every_context": (
        "solm/engines/torch/engine.py", "        reads = [(1, [(s * c, (s + 1) * c), (base + s, base + s + 1)]) for s in range(k)]",
        "        reads = [(1, [(0, (s + 1) * c), (base + s, base + s + 1)]) for s in range(k)]",
        ["tests/test_bench_step.py"]),
    "topic_cap_setting_ignored": (
        'solm/decode/pasta/runtime.py',
        '            capped = thread.topic_len >= config.max_topic_tokens',
        '            capped = thread.topic_len >= 24',
        ['tests/test_runtime.py']),
    "engine_availability_ignored": (
        "solm/engines/llamacpp/engine.py",
        "        return None if llama_cpp_available() else \"llama-cpp-python is not installed\"",
        "        return None", ["tests/test_bench_step.py"]),
    "pad_cycle_not_recorded_for_adapters": (
        "solm/core/models.py", "                       pad_cycle=meta.get(\"pad_cycle\", 1))",
        "                       pad_cycle=None)", ["tests/test_pdiff_sft.py"]),
    "pad_cycle_later_pads_not_pads": (
        'solm/decode/pdiff/runtime.py',
        '        is_pad = torch.isin(chosen, self._on(device, "pads"))',
        '        is_pad = chosen == self.vocab.pad',
        ['tests/test_pdiff_runtime.py']),
    "pdiff_steps_not_shortened": (
        "solm/decode/pdiff/runtime.py",
        "        c.budget = min(c.budget, c.steps + math.ceil(len(c.masked) * cfg.steps_ratio))",
        "        c.budget = c.budget", ["tests/test_pdiff_runtime.py"]),
    "paragraphs_never_together": (
        "solm/annotate/rules.py", "                                              and not shape.paragraphs_together):",
        "                                              ):", ["tests/test_annotation_gain.py"]),
    "topic_first_naming_word": (
        "solm/annotate/rules.py",
        "            start = max(naming, key=lambda i: (len(words[i].strip(_EDGE)), -i))",
        "            start = naming[0]", ["tests/test_annotation_gain.py"]),
    "topic_discourse_words_allowed": (
        "solm/annotate/rules.py", "w not in FUNCTION_WORDS and w not in DISCOURSE_WORDS and",
        "w not in FUNCTION_WORDS and", ["tests/test_annotation_gain.py"]),
    "distill_paragraphs_setting_ignored": (
        "solm/prefs/distill_job.py",
        "    shape = RuleShape.speed(paragraphs_together=rules.paragraphs_together)",
        "    shape = RuleShape.speed()", ["tests/test_own_answers.py"]),
    "distill_match_ignored": (
        "solm/cli/pasta_distill.py", "        elif wanted is None or wanted.search(r.prompt):",
        "        else:", ["tests/test_own_answers.py"]),
    "content_score_ratio_uncapped": (
        "solm/prefs/score.py", "    ratio = min(1.0, content_tokens / max(1, baseline_tokens))",
        "    ratio = content_tokens / max(1, baseline_tokens)", ["tests/test_prefs.py"]),
    "content_score_repeats_not_subtracted": (
        "solm/prefs/score.py",
        "    return s.speedup + (quality_weight * (s.quality or 0.0) if quality_weight else 0.0) \\\n        - s.penalty",
        "    return s.speedup + (quality_weight * (s.quality or 0.0) if quality_weight else 0.0)",
        ["tests/test_prefs.py"]),
}

# the onnxruntime engine
ONNXRT = {
    "ort_rope_interleaved": (
        "solm/engines/onnxruntime/graph.py", "interleaved=0, num_heads=heads",
        "interleaved=1, num_heads=heads", ["tests/test_onnxruntime.py"]),
    "ort_residual_sum_dropped": (
        "solm/engines/onnxruntime/graph.py", "        return normed, total", "        return normed, x",
        ["tests/test_onnxruntime.py"]),
    "ort_kv_widths_swapped": (
        "solm/engines/onnxruntime/graph.py",
        "    qkv_widths = w.const(np.array([s.heads * d, s.kv_heads * d, s.kv_heads * d], np.int64))",
        "    qkv_widths = w.const(np.array([s.kv_heads * d, s.heads * d, s.kv_heads * d], np.int64))",
        ["tests/test_onnxruntime.py"]),
    "ort_fed_cells_take_the_read_columns": (
        "solm/engines/onnxruntime/step.py", "    column[written] = len(read) + np.arange(len(written))",
        "    column[written] = np.arange(len(written))", ["tests/test_onnxruntime.py"]),
    "ort_hidden_cells_never_freed": (
        "solm/engines/onnxruntime/step.py", "            self._free.append(cells.pop(token))",
        "            cells.pop(token)", ["tests/test_onnxruntime.py"]),
    "ort_i8_full_range_overflows": (
        "solm/engines/onnxruntime/graph.py", "I8_TOP = 63", "I8_TOP = 127", ["tests/test_onnxruntime.py"]),
    "ort_nibbles_swapped": (
        "solm/engines/onnxruntime/graph.py", "        q = q[..., 0::2] | (q[..., 1::2] << 4)",
        "        q = q[..., 1::2] | (q[..., 0::2] << 4)", ["tests/test_onnxruntime.py"]),
    "ort_pdiff_given_pastas_mask": (
        "solm/engines/onnxruntime/step.py", '    if kind == "pdiff":\n', '    if False:\n',
        ["tests/test_engine_matrix.py"]),
    "demo_tokens_per_pass_not_kept": (
        "solm/cli/pasta_demo.py", '    record_tokens_per_pass(model, "pasta", cfg,',
        '    (lambda *a: None)(model, "pasta", cfg,', ["tests/test_demo.py"]),
    "bench_step_times_another_onnx_format": (
        "solm/cli/bench_step.py", '    onnx_types: str = typer.Option(DECODE_FORMATS["onnx_type"],',
        '    onnx_types: str = typer.Option("i8",', ["tests/test_bench_step.py"]),
    "ort_h2o_refusal_dropped": (
        "solm/engines/onnxruntime/engine.py", "        if policy is not None and policy.needs_scores:",
        "        if False:", ["tests/test_engine_matrix.py"]),
}
# chunk blocks, self-distilled chunks, the first run's engine order and yardstick
BLOCKS_AND_FIRST_RUN = {
    "pdiff_block_sees_later_blocks": (
        "solm/core/systems/pdiff.py",
        '    return (k["thread"] > MAIN) & (k["thread"] == q["thread"]) & (k["block"] <= q["block"])',
        '    return (k["thread"] > MAIN) & (k["thread"] == q["thread"])',
        ["tests/test_pdiff_blocks.py"]),
    "pdiff_async_close_in_a_block_alone": (
        "solm/core/systems/pdiff.py",
        "        closing = tok == self.vocab.async_close and attrs.order > 0",
        "        closing = False", ["tests/test_pdiff_blocks.py"]),
    "pdiff_finished_block_not_refed": (
        "solm/decode/pdiff/runtime.py",
        "            c.stale, c.edge, c.block_steps = finished, None, 0",
        "            c.stale, c.edge, c.block_steps = [], c.edge, 0", ["tests/test_pdiff_blocks.py"]),
    "pdiff_training_masks_every_block": (
        "solm/train/pdiff_sft.py", "        if self.vocab.block_size > 0:\n            diffusable_all",
        "        if False:\n            diffusable_all", ["tests/test_pdiff_blocks.py"]),
    "pdiff_block_draw_not_counted": (
        "solm/train/pdiff_sft.py", "            scale[row + 1] = float(counts.get(j, 1))",
        "            scale[row + 1] = 1.0", ["tests/test_pdiff_blocks.py"]),
    "llama_pdiff_blocks_in_one_call": (
        "solm/engines/llamacpp/step.py",
        "            rank = [block[i] - first[(int(owners[i]), int(thread[i]))] for i in chunk_rows]",
        "            rank = [0 for i in chunk_rows]", ["tests/test_llamacpp.py"]),
    "chunk_distill_keeps_blocks_closed_for_the_model": (
        "solm/prefs/chunk_distill.py", "set(flags) & CLOSED_FOR_IT:", "set():",
        ["tests/test_chunk_distill.py"]),
    "chunk_distill_keeps_the_rows_promises": (
        "solm/prefs/chunk_distill.py", "            tok = by_tens[tens_for(lengths[a.order])]",
        "            tok = tok", ["tests/test_chunk_distill.py"]),
    "chunk_distill_no_round_trip": (
        "solm/prefs/chunk_distill.py", "    if text_ids(tokenizer, text) != ids:",
        "    if False:", ["tests/test_chunk_distill.py"]),
    "auto_torch_before_onnxruntime": (
        "solm/engines/__init__.py", "(LlamaCppEngine(), OnnxRuntimeEngine(),\n"
        "                                                  TorchEngine())",
        "(LlamaCppEngine(), TorchEngine(),\n                                                  "
        "OnnxRuntimeEngine())", ["tests/test_cli_validation.py"]),
    "yardstick_decodes_one_token": (
        "solm/decode/pasta/demo.py",
        '        sides["fastest"] = lambda: yardstick(prompt, max(1, len(content)))',
        '        sides["fastest"] = lambda: yardstick(prompt, 1)', ["tests/test_demo.py"]),
    "adapter_shards_never_split": (
        "solm/core/adapter_packing.py", "    if len(shards) == 1:", "    if True:",
        ["tests/test_adapters.py"]),
    "tip_step_killer_off_by_one": (
        "solm/decode/tip/decode_file.py",
        '                steps[s - 1]["killed_by"] = step  # the step whose register reuse killed it',
        '                steps[s - 1]["killed_by"] = step - 1', ["tests/test_tip_display.py"]),
    "tip_decode_never_graded": (
        "solm/decode/tip/decode_file.py", "    if any(k in rec.meta for k in GOLD_FIELDS):",
        "    if False:", ["tests/test_tip_display.py"]),
    "tip_bench_replays_the_plain_text": (
        "solm/cli/tip.py", '                      text_ids(tok, r.get("annotated") or r["response"])',
        '                      text_ids(tok, r["response"])', ["tests/test_tip_cli.py"]),
    "tip_report_interval_over_one_more": (
        "solm/eval/tip_eval.py", "        low, high = wilson_interval(solved, len(by_problem))",
        "        low, high = wilson_interval(solved, len(by_problem) + 1)",
        ["tests/test_tip_eval.py"]),
    "tip_eval_forgets_earlier_engines": (
        "solm/cli/tip_eval.py", "            settings[\"engines\"] = {**earlier, **engines}",
        "            settings[\"engines\"] = engines", ["tests/test_llamacpp.py"]),
    "demo_cut_not_said": (
        "solm/cli/pasta_demo.py", '    if "max_new_tokens" in live_run.flags:\n        console',
        '    if False:\n        console', ["tests/test_demo.py"]),
    "auto_names_engines_ranked_below": (
        "solm/engines/__init__.py", "        elif not able:", "        else:",
        ["tests/test_cli_validation.py"]),
    "yardstick_format_not_the_fastest": (
        "solm/engines/cost.py", "    best = min(rows, key=lambda e: pass_ms(e[\"ms\"], 1.0))",
        "    best = rows[0]", ["tests/test_demo.py"]),
}
MUTATIONS.update(PAPER_PATH)
AUDITED = {
    "serve_cancelled_before_a_token_is_500": (
        "solm/serve/engine.py", 'ApiError(499, "the request was cancelled")',
        'ApiError(500, "the request was cancelled")', ["tests/test_serve_engine.py"]),
    "serve_empty_last_chunk_after_a_cancel": (
        "solm/serve/engine.py",
        "if rest or (job.top_k is not None and content_len > live.sent_logprobs):",
        "if rest or (job.top_k is not None and content_len >= live.sent_logprobs):",
        ["tests/test_serve_engine.py"]),
    "serve_take_fills_half_the_room": (
        "solm/serve/engine.py", "            room -= 1\n", "            room -= 2\n",
        ["tests/test_serve_engine.py"]),
    "pdiff_report_drops_a_chunks_last_slot": (
        "solm/decode/pdiff/runtime.py", "inner = c.tokens[1:-1]", "inner = c.tokens[1:-2]",
        ["tests/test_pdiff_runtime.py"]),
    "ort_prefill_run_overruns_its_end": (
        "solm/engines/onnxruntime/step.py", "lo, hi = max(a, at), min(b, at + rows)",
        "lo, hi = max(a, at), max(b, at + rows)", ["tests/test_onnxruntime.py"]),
    "ort_one_run_said_to_need_runs": (
        "solm/engines/onnxruntime/step.py", "        return False  # one run already",
        "        return True  # one run already", ["tests/test_onnxruntime.py"]),
    "ort_own_run_read_counts_as_later": (
        "solm/engines/onnxruntime/step.py", "(fed[None, :] > row_runs[:, None])",
        "(fed[None, :] >= row_runs[:, None])", ["tests/test_onnxruntime.py"]),
    "ort_probe_time_adds_the_start": (
        "solm/engines/onnxruntime/engine.py",
        "        return time.perf_counter() - t0\n\n    def close(self) -> None:\n        self.model = None",
        "        return time.perf_counter() + t0\n\n    def close(self) -> None:\n        self.model = None",
        ["tests/test_bench_step.py"]),
    "ort_engine_silent": (
        "solm/engines/onnxruntime/engine.py", '        notice(f"engine onnxruntime: ',
        '        (f"engine onnxruntime: ', ["tests/test_batch_refusals.py"]),
    "cost_folder_timed_under_its_spelling": (
        "solm/engines/cost.py", "in ALIASES or not folder.exists() else",
        "in ALIASES or folder.exists() else", ["tests/test_engine_seam.py"]),
    "pack_ignores_the_parent_given": (
        "solm/core/adapter_packing.py", "    if parent is not None:\n        config =",
        "    if False:\n        config =", ["tests/test_adapters.py"]),
    "grpo_curves_leave_out_varying_groups": (
        "solm/train/plots.py", '("groups_varying", "groups whose correctness varies"),',
        "", ["tests/test_tip_grpo.py"]),
}
# Planned Diffusion's training rows from a distill, content against the baseline, the demo
DISTILL_ROWS_AND_DEMO = {
    "chunk_distill_trains_on_dropped_rows": (
        "solm/prefs/chunk_distill.py",
        '    kept = [row for row in read_jsonl(folder / DECODED) if "dropped" not in row]',
        "    kept = list(read_jsonl(folder / DECODED))", ["tests/test_chunk_distill.py"]),
    "report_content_ratio_inverted": (
        "solm/eval/report.py", "    return content / baseline", "    return baseline / content",
        ["tests/test_pdiff_eval.py"]),
    "report_content_ratio_of_the_first_run": (
        "solm/eval/report.py",
        "        base = baseline_content(s)\n        for label, m in s[\"methods\"].items():\n"
        "            q = m.get(\"vs_baseline\") or {}",
        "        base = base if out else baseline_content(s)\n"
        "        for label, m in s[\"methods\"].items():\n            q = m.get(\"vs_baseline\") or {}",
        ["tests/test_pdiff_eval.py"]),
    "llama_decodes_on_the_calling_thread": (
        "solm/engines/llamacpp/compute_thread.py", '    if getattr(_HERE, "inside", False):',
        "    if True:", ["tests/test_llama_thread.py"]),
    "pdiff_demo_same_side_first": (
        "solm/decode/pdiff/demo.py", "        for run, times in (order if i % 2 == 0 else order[::-1]):",
        "        for run, times in order:", ["tests/test_pdiff_demo.py"]),
    "pdiff_demo_slowest_run": (
        "solm/decode/pdiff/demo.py",
        "        return self.content_tokens / max(min(self.pdiff_s), 1e-9)",
        "        return self.content_tokens / max(max(self.pdiff_s), 1e-9)",
        ["tests/test_pdiff_demo.py"]),
    "pdiff_demo_chunk_closer_outside": (
        "solm/cli/pdiff_demo.py", "        cut = at + len(tag) if inside else at",
        "        cut = at if inside else at", ["tests/test_pdiff_demo.py"]),
}
# the step on a GPU: device sampling, one copy per pass, the all-tensor step
GPU_STEP = {
    "noise_mix_drops_the_high_half": (
        "solm/core/counter_noise.py", "    high = ((x * (c >> 16)) & 0xFFFF) << 16",
        "    high = 0", ["tests/test_device_sampling.py"]),
    "sampled_ids_copied_per_row": (
        "solm/core/sampling.py", "        return ids.tolist(), None",
        "        return [int(t) for t in ids], None", ["tests/test_host_syncs.py"]),
    "pasta_draws_all_at_index_zero": (
        "solm/decode/pasta/runtime.py",
        "        return self.sampler.draw(banned, history, stream=thread.tid, index=len(thread.fed),",
        "        return self.sampler.draw(banned, history, stream=thread.tid, index=0,",
        ["tests/test_device_sampling.py"]),
    "top_p_keeps_the_whole_tail": (
        "solm/core/sampling.py",
        "        keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < top_p[:, None]",
        "        keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < 1.0",
        ["tests/test_device_sampling.py"]),
    "device_step_ignores_the_mask": (
        "solm/engines/torch/device_step.py",
        "        mask = pairwise(self.visible, q, k)\n",
        "        mask = pairwise(self.visible, q, k) | True\n",
        ["tests/test_compiled_every_system.py"]),
    "pdiff_chunk_choices_copied_per_chunk": (
        "solm/decode/pdiff/runtime.py",
        "            rows = slice(at, at + len(job.masked))\n",
        "            _ = chunk[:1].tolist()\n            rows = slice(at, at + len(job.masked))\n",
        ["tests/test_host_syncs.py"]),
    "tip_page_reads_by_a_bool_mask": (
        "solm/decode/tip/runtime.py",
        "        return torch.repeat_interleave(base, counts, output_size=total) + torch.arange(total)",
        "        offsets = torch.arange(self.page_size)\n"
        "        grid = ids[:, None] * self.page_size + offsets[None, :]\n"
        "        return grid[offsets[None, :] < counts[:, None]]",
        ["tests/test_host_syncs.py"]),
}
MUTATIONS.update(BLOCKS_AND_FIRST_RUN)
MUTATIONS.update(GPU_STEP)
MUTATIONS.update(AUDITED)
MUTATIONS.update(DISTILL_ROWS_AND_DEMO)
MUTATIONS.update(ONNXRT)
MUTATIONS.update(SPEED_SHAPE)
MUTATIONS.update(LLAMA_RULES)
MUTATIONS.update(NEW_USER)
MUTATIONS.update(OWN_ANSWERS)
MUTATIONS.update(AUDIT)
MUTATIONS.update(AUDIT2)
MUTATIONS.update(AUDIT3)
# round 4 but its one equivalent mutant (at left == 1 both readings take every masked slot)
MUTATIONS.update({k: v for k, v in AUDIT4.items()
                  if k != "pdiff_last_step_leaves_slots_masked"})
MUTATIONS.update(AUDIT5)


def tests_of(mutation: tuple) -> list[str]:
    return list(mutation[3]) if len(mutation) > 3 else TESTS


def copy_tree(dest: Path) -> Path:
    for part in ("solm", "tests", "configs", "bench"):  # configs: the launch configs tests use;
        # bench: the benchmark scripts whose helpers tests import
        shutil.copytree(ROOT / part, dest / part,
                        ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def run_tests(root: Path, tests: list[str], first_failure: bool = False,
              threads: int | None = None, workers: int = 1) -> tuple[int, list[str], str]:
    """Whole test files run without their slow tests; a test named by its node id runs even
    when it is marked slow (it was named because it catches something). With
    `first_failure` the run stops at the first failing test (a mutation is caught by one)."""
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"}
    if threads:
        env |= {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    files = [t for t in tests if "::" not in t]
    named = [t for t in tests if "::" in t]
    code, failed, summaries = 0, set(), []
    for group, marker in ((files, ["-m", "not slow"]), (named, [])):
        if not group or (first_failure and failed):
            continue
        stop = ["-x"] if first_failure else []
        spread = ["-n", str(workers)] if workers > 1 else []
        cmd = [sys.executable, "-m", "pytest", "-q", *marker, *stop, *spread,
               "-p", "no:cacheprovider",
               "-rf", *group]
        r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
        failed |= set(re.findall(r"^FAILED (\S+)", r.stdout, re.M))
        if r.returncode not in (0, 1, 5) and not failed:
            # the run itself died (a crashed process, a collection error): the suite fails
            failed.add(f"(the test run ended with exit status {r.returncode})")
        summaries.append(r.stdout.strip().splitlines()[-1] if r.stdout.strip()
                         else r.stderr[-300:])
        code = code or r.returncode
    return code, sorted(failed), "; ".join(summaries)


def mutated_copy(name: str, workdir: Path) -> Path:
    dest = copy_tree(workdir / name)
    path, old, new = {**MUTATIONS, **SPEED_SHAPE, **AUDIT, **AUDIT2, **AUDIT3, **AUDIT4, **AUDIT5,
                      **AUDIT6}[name][:3]
    target = dest / path
    text = target.read_text()
    if text.count(old) != 1:
        raise SystemExit(f"mutation {name}: expected the text once in {path}, found "
                         f"{text.count(old)} times (the code moved: update the mutation)")
    target.write_text(text.replace(old, new))
    return dest


def imported_from(root: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-c", "import solm; print(solm.__file__)"], cwd=root,
                          env=env, capture_output=True, text=True).stdout.strip()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "runs" / "mutations.json")
    p.add_argument("--only", nargs="*", default=None)
    p.add_argument("--audit", action="store_true",
                   help="run the re-audit's bugs instead and report the share caught")
    p.add_argument("--audit2", action="store_true", help="the re-audit's second round")
    p.add_argument("--audit3", action="store_true", help="the re-audit's third round")
    p.add_argument("--audit4", action="store_true", help="the re-audit's fourth round")
    p.add_argument("--audit5", action="store_true", help="the re-audit's fifth round")
    p.add_argument("--audit6", action="store_true", help="the new-user ten")
    p.add_argument("--jobs", type=int, default=1,
                   help="mutations tested at once (each with cores/jobs torch threads)")
    p.add_argument("--every-failure", action="store_true",
                   help="run each mutated suite to the end instead of stopping at the first "
                        "failing test (slower; lists every test that catches it)")
    args = p.parse_args()
    table = (AUDIT6 if args.audit6 else AUDIT5 if args.audit5 else AUDIT4 if args.audit4 else AUDIT3 if args.audit3 else AUDIT2 if args.audit2
             else AUDIT if args.audit else MUTATIONS)
    args.audit = (args.audit or args.audit2 or args.audit3 or args.audit4 or args.audit5
                  or args.audit6)
    names = args.only or list(table)
    unknown = [n for n in names if n not in table]
    if unknown:
        raise SystemExit(f"unknown mutations: {', '.join(unknown)}")
    report: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        clean = copy_tree(work / "clean")
        if not imported_from(clean).startswith(str(clean)):
            raise SystemExit(f"the copy is not what imports as solm ({imported_from(clean)})")
        every_test = sorted({t for n in names for t in tests_of(table[n])})
        code, failed, summary = run_tests(clean, every_test, workers=args.jobs)
        report["(no mutation)"] = {"failed": failed, "summary": summary}
        print(f"(no mutation): {summary}", flush=True)
        if code != 0:
            for f in failed:
                print(f"    {f}", flush=True)
            print("the unmutated tests fail; fix them first")
            return 2
        threads = max(1, (os.cpu_count() or 1) // args.jobs) if args.jobs > 1 else None

        def one(name: str) -> tuple[str, list[str], str]:
            copy = mutated_copy(name, work)
            _, failed, summary = run_tests(copy, tests_of(table[name]),
                                           first_failure=not args.every_failure,
                                           threads=threads)
            shutil.rmtree(copy, ignore_errors=True)
            return name, failed, summary

        args.out.parent.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for name, failed, summary in pool.map(one, names):
                report[name] = {"failed": failed, "summary": summary}
                print(f"{name}: {len(failed)} failing tests ({summary})", flush=True)
                for f in failed:
                    print(f"    {f}", flush=True)
                args.out.write_text(json.dumps(report, indent=2))  # kept if the run is cut
    uncaught = [n for n in names if not report[n]["failed"]]
    if args.audit:
        report["(caught)"] = {"caught": len(names) - len(uncaught), "planted": len(names),
                              "share": round((len(names) - len(uncaught)) / len(names), 3),
                              "uncaught": uncaught}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    if uncaught:
        print(f"NOT CAUGHT: {', '.join(uncaught)}")
    if args.audit:
        print(f"caught {len(names) - len(uncaught)} of {len(names)}")
        return 0
    return 1 if uncaught else 0


if __name__ == "__main__":
    sys.exit(main())
