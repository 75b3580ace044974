"""``fp4moe-gate footprint``: exact MXFP4 routed-expert bytes per rank / layer / model (bytes, GiB, GB).

What the routed-expert weights of a DeepSeek-V4 rank cost, to the byte, for every model x TP x
EP x align x GU-interleave (bytes, GiB = 2^30 and GB = 10^9 side by side). With --check-budget
each catalogue row is measured through the real weight path and judged against the packaged
budget, so that padding creeping back fails.

Inputs: the packaged model catalogue and footprint budget (--model, --tp, --ep, --align pick
rows).

Exit 0: the table was printed; with --check-budget every row is within its budget
Exit 1: with --check-budget: a row's measured bytes exceed its budget (the row and both figures
named)
Exit 2: an option names no catalogue row, or the budget file is unreadable
"""

from __future__ import annotations

import argparse

from fp4moe.commands import output
from fp4moe.commands.options import PASS, STATUS_BY_EXIT, add_command, add_outputs, bind
from fp4moe.infra.errors import EXIT_OK
from fp4moe.model.catalogue import CATALOGUE_FILE, get_model, load_catalogue, parallel_config
from fp4moe.reference.footprint import ALIGNS, BUDGET_FILE, GB, GIB, ROUTER_DTYPES, SHARED_DTYPES, NonRoutedAssumption, layer_footprint


def register(subparsers) -> None:
    p = add_command(subparsers, "footprint", __doc__)
    p.add_argument("--model", default="all", help="catalogue model name or 'all' (default: all)")
    p.add_argument(
        "--tp", type=int, nargs="+", default=None, help="tensor-parallel size(s) (default: the model's catalogue TPs)"
    )
    p.add_argument(
        "--ep",
        default=None,
        help="expert-parallel size, or 'all' for the catalogue EPs dividing TP "
        "(default: 'all' when --tp is not given, else 1)",
    )
    p.add_argument("--align", default="all", help="intermediate padding alignment: 128, 256 or 'all' (default)")
    p.add_argument(
        "--gu-interleave",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="GU-interleaved scale shuffle (a16w4/a8w4 DeepSeek-V4 kernels; default) or the plain one",
    )
    p.add_argument("--no-shuffle", action="store_true", help="report padded tensors without gfx950 shuffle growth")
    p.add_argument(
        "--shared",
        choices=SHARED_DTYPES,
        default=None,
        help="ADD an ASSUMED shared-expert term per layer (not in the budget; labelled in the output)",
    )
    p.add_argument("--router", choices=ROUTER_DTYPES, default=None, help="ADD an ASSUMED router-gate term per layer")
    add_outputs(p, json="every row's bytes; with --check-budget each row against the budget")
    p.add_argument(
        "--check-budget",
        action="store_true",
        help=f"measure every catalogue row through the real weight path and compare with {BUDGET_FILE.name}; exit 1 on growth",
    )
    bind(p, run, inputs=lambda a: [CATALOGUE_FILE, BUDGET_FILE])


def _parse_aligns(value: str) -> list[int]:
    if value == "all":
        return list(ALIGNS)
    try:
        a = int(value)
    except ValueError:
        raise ValueError(f"--align {value!r}: valid values are {', '.join(map(str, ALIGNS))} or 'all'") from None
    if a not in ALIGNS:
        raise ValueError(f"--align {a}: valid values are {', '.join(map(str, ALIGNS))} or 'all'")
    return [a]


def _rows(args) -> list[tuple[str, int, int]]:
    names = sorted(load_catalogue()) if args.model == "all" else [get_model(args.model).name]
    rows = []
    for name in names:
        spec = get_model(name)
        tps = args.tp if args.tp else list(spec.tp)
        for tp in tps:
            if args.ep is None:
                eps = [e for e in spec.ep if tp % e == 0] if not args.tp else [1]
            elif args.ep == "all":
                eps = [e for e in spec.ep if tp % e == 0]
            else:
                try:
                    eps = [int(args.ep)]
                except ValueError:
                    raise ValueError(f"--ep {args.ep!r}: an integer or 'all'; catalogue values: {list(spec.ep)}") from None
            for ep in eps:
                parallel_config(spec, tp, ep)  # validates; the message lists what is valid
                rows.append((name, tp, ep))
    return rows


def _fmt_table(fps) -> str:
    """Columns sized to their widest cell, one space apart at least: 3-digit TP/EP or a
    long model name never run into the next column."""
    head = ["model", "tp", "ep", "align", "E", "I_p", "P", "pad", "bytes/layer", "GiB", "GB", "bytes/model", "GiB",
            "GB", "waste%"]
    rows = []
    for f in fps:
        lb, mb = f.layer_bytes, f.model_bytes
        rows.append([f.model, str(f.tp), str(f.ep), str(f.align), str(f.experts), str(f.intermediate),
                     str(f.padded_intermediate), str(f.intermediate_pad), f"{lb:,}", f"{lb / GIB:.4f}", f"{lb / GB:.4f}",
                     f"{mb:,}", f"{mb / GIB:.2f}", f"{mb / GB:.2f}", f"{f.waste_pct:.2f}"])
    widths = [max(len(c) for c in col) for col in zip(head, *rows)]

    def line(cells):
        first = f"{cells[0]:<{widths[0]}}"
        return first + "".join(f" {c:>{w}}" for c, w in zip(cells[1:], widths[1:]))

    lines = [line(head)]
    lines += ["-" * len(lines[0])] + [line(r) for r in rows]
    note = "bytes per rank; GiB = 2^30 B, GB = 10^9 B; routed FP4 weights + e8m0 scales"
    note += ", after gfx950 scale-shuffle growth" if fps and fps[0].shuffle else ", before shuffle growth"
    if fps and fps[0].non_routed_label:
        note += f"; PLUS ASSUMED non-routed terms ({fps[0].non_routed_label})"
    note += "; waste = padding + shuffle growth, % of routed bytes"
    return "\n".join(lines + [note])


def _budget_rows(args) -> list | None:
    """The catalogue rows ``--check-budget`` judges: all (None), or those that ``--model``,
    ``--tp`` and ``--ep`` select. Every option is checked against what the budget can judge, so
    that a value it cannot judge (an unknown model, a TP the catalogue does not run, an
    alignment or layout the budget does not hold) is exit 2 naming it, never a pass over rows
    that were not measured."""
    from fp4moe.model.catalogue import catalogue_rows
    from fp4moe.reference.footprint import DEFAULT_ALIGN

    if _parse_aligns(args.align) not in (list(ALIGNS), [DEFAULT_ALIGN]):
        raise ValueError(f"--align {args.align}: --check-budget judges the budget's align {DEFAULT_ALIGN} rows; "
                         f"drop --align or give {DEFAULT_ALIGN}")
    for given, option in ((not args.gu_interleave, "--no-gu-interleave"), (args.no_shuffle, "--no-shuffle"),
                          (args.shared, "--shared"), (args.router, "--router")):
        if given:
            raise ValueError(f"{option}: --check-budget judges the budget's rows as written (GU-interleaved, "
                             f"shuffled, routed experts only); drop {option}")
    if args.model == "all" and args.tp is None and args.ep in (None, "all"):
        return None
    names = set(load_catalogue()) if args.model == "all" else {get_model(args.model).name}
    rows = [r for r in catalogue_rows() if r.model.name in names]
    if args.tp is not None:
        have = sorted({r.tp for r in rows})
        of = "" if args.model == "all" else f" of {args.model}"
        for tp in args.tp:
            if tp not in have:
                raise ValueError(f"--tp {tp}: no catalogue row{of} runs tp {tp}, so the budget cannot "
                                 f"judge it; catalogue tp values: {have}")
        rows = [r for r in rows if r.tp in args.tp]
    if args.ep not in (None, "all"):
        try:
            ep = int(args.ep)
        except ValueError:
            raise ValueError(f"--ep {args.ep!r}: an integer or 'all'") from None
        have = sorted({r.ep for r in rows})
        if ep not in have:
            raise ValueError(f"--ep {ep}: no selected catalogue row runs ep {ep}; ep values there: {have}")
        rows = [r for r in rows if r.ep == ep]
    return rows


def _check_budget(args) -> int:
    from fp4moe.gates.footprint import check_budget, require_judged

    v = check_budget(_budget_rows(args))
    for r in v.rows:
        print(f"{'ok  ' if r['ok'] else 'OVER'} {r['row']:<34} {r['measured_bytes_per_layer']:>16,} / {r['budget']:>16,} B")
    for f in v.failures:
        print(f"FAIL {f}")
    require_judged(v)  # before any record: an unjudged row is exit 2 (main writes that record)
    output.write_json(args, {"status": STATUS_BY_EXIT[v.exit_code], **v.to_dict()})
    return v.exit_code


def run(args) -> int:
    if args.check_budget:
        return _check_budget(args)
    aligns = _parse_aligns(args.align)
    extra = None
    if args.shared or args.router:
        extra = NonRoutedAssumption(shared=args.shared or "none", router=args.router or "none")
    fps = [
        layer_footprint(m, tp, ep, a, args.gu_interleave, shuffle=not args.no_shuffle, non_routed=extra)
        for (m, tp, ep) in _rows(args)
        for a in aligns
    ]
    print(_fmt_table(fps))
    output.write_json(args, {"status": PASS, "units": {"bytes": 1, "GiB": GIB, "GB": GB}, "rows": [f.to_dict() for f in fps]})
    return EXIT_OK
