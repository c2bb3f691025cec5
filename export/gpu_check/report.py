"""report.md: the report.json of a run as a page a reader can scan."""

from __future__ import annotations

from pathlib import Path


def markdown(report: dict) -> str:
    steps = report["steps"]
    lines = [
        f"# attnserve-gpu-check: {'PASSED' if report['passed'] else 'FAILED'}",
        "",
        f"`{report['command']}`, {report['started']}, {report['seconds']} s, provider {report['provider']}, "
        f"bundle {report['bundle']}",
        "",
        "| step | ok | seconds | failures |",
        "|---|---|---|---|",
    ]
    for name, s in steps.items():
        why = "; ".join(s.get("failures", [])) or s.get("error", "")
        lines.append(f"| {name} | {'yes' if s['ok'] else 'NO'} | {s['seconds']} | {why[:300]} |")
    m = steps.get("machine", {}).get("result", {})
    if m:
        smi = m.get("nvidia_smi", {})
        gpus = ", ".join(f"{g.get('name')} (driver {g.get('driver')})" for g in smi.get("gpus", [])) or "none"
        lines += [
            "",
            "## Machine",
            f"- GPU: {gpus}; driver's CUDA {smi.get('driver_cuda_version')}",
            f"- ONNX Runtime {m.get('onnxruntime')} ({m.get('device')}), providers {m.get('available_providers')}, "
            f"built with CUDA {m.get('cuda_version_built_with')}",
            f"- CPU: {m.get('cpu')}",
            f"- nvidia wheels: {m.get('nvidia_wheels')}",
            f"- libraries loaded: {[Path(p).name for p in m.get('loaded_libraries', [])]}",
        ]
    v = steps.get("variant", {}).get("result", {})
    if v:
        lines += [
            "",
            "## Variant",
            f"- fp16 added to a copy ({v['bundle_copy']}): {v['fp16_bytes'] / 1e6:.1f} MB {v['fp16_files']}",
        ]
    r = steps.get("verify", {}).get("result", {})
    if r:
        lines += ["", "## Verify"]
        for name in ("fp16", "int8", "fp32"):
            if name not in r:
                continue
            x = r[name]
            inv = {k: {m: e[m] for m in e if m.endswith(("differ", "diff"))} for k, e in x.get("invariance", {}).items()}
            lines.append(f"- **{name}** served as {x['variant']} on {x['provider']} ({x['kv_cache']} cache)")
            if "fallback" in x:
                lines.append(f"  - fell back: {x['fallback']}")
            lines.append(f"  - alone vs batched: {inv or x.get('invariance_error')}")
            agree = x.get("greedy_vs_fp32_reference")
            if agree:
                lines.append(
                    f"  - greedy vs the fp32 reference: {agree['agreement_pct']}% of {agree['inputs']}; "
                    f"largest fp32 log-probability gap of a difference {agree['max_logprob_gap_fp32']}"
                )
            lines.append(f"  - residency: {x.get('residency', {}).get('places') or x.get('residency_error')}")
    b = steps.get("bench", {}).get("result", {})
    if b:
        backends = list(dict.fromkeys(c["backend"] for c in b["results"]))
        lines += ["", f"## Bench ({b['provider']}; {b['torch']}) {b.get('note', '')}", ""]
        lines.append("| batch | tokens | " + " | ".join(f"{k} ms/step (tok/s)" for k in backends) + " |")
        lines.append("|---|---|" + "---|" * len(backends))
        for n in b["lengths"]:
            for bs in b["batches"]:
                cells = {c["backend"]: c for c in b["results"] if c["batch"] == bs and c["output_len"] == n}
                vals = [
                    f"{cells[k]['ms_per_step']:.3f} ({cells[k]['tokens_per_s']:.0f})" if k in cells else "-" for k in backends
                ]
                lines.append(f"| {bs} | {n} | " + " | ".join(vals) + " |")
    lines += serve_lines(steps.get("serve", {}).get("result", {}))
    return "\n".join(lines) + "\n"


def serve_lines(s: dict) -> list[str]:
    """report.md's Serve section, from the serve step's result (none when the step did not run or failed)."""
    if not s:
        return []
    lines = [
        "",
        "## Serve",
        f"- /info: {s['info']}",
        f"- {s['words']} of the bundle's samples (GET /samples), greedy and seeded, {s['clients']} concurrent clients "
        f"({s['concurrent_seconds']} s) "
        f"against each alone: {s['differ_count']} of {2 * s['words']} answers differ",
    ]
    if "beam4" in s:
        b, sc, chat = s["beam4"], s["score"], s["chat"]
        lines += [
            f"- beam 4 over {b['words']} of them, concurrent against alone: {b['differ_count']} n-best lists differ",
            f"- /score of {sc['words']} greedy answers: largest gap to the generation's log-probabilities "
            f"{sc['max_gap_vs_generation']:.3g}, concurrent against alone {sc['max_gap_concurrent_vs_alone']:.3g} "
            f"(tolerance {sc['tolerance']})",
            f"- /v1/chat/completions for {chat['word']!r}: {chat['answer']!r}, "
            f"{'the same as' if chat['same_as_generate'] else 'NOT the same as'} /generate's",
        ]
    return lines
