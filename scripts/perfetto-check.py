#!/usr/bin/env python3
"""scripts/perfetto-check.py TRACE.json: opens a Chrome trace-event JSON file (what
`davinci-workload --trace` and `Device::trace` write) in Perfetto's trace processor, the
engine behind the Perfetto UI, and prints one JSON object on stdout:

    {"slices": N, "flows": N, "problems": [{"name", "idx", "severity", "source", "value"}]}

`problems` are the import statistics of severity error or data_loss that are not zero (what
the UI's "info and stats" page flags). Exit status: 0 the file was imported (the caller judges
the counts); 1 the trace processor failed on it; 3 skipped, with {"skipped": REASON}: the
`perfetto` package is not installed (pip install perfetto), or its trace processor cannot be
had (the package fetches a trace_processor_shell binary on first use and caches it under
~/.local/share/perfetto; without network access to Perfetto's artifacts that fails).

Environment:
  DAVINCI_TRACE_PROCESSOR   a trace_processor_shell binary to use instead of the package's
"""
import json
import os
import sys


def skip(reason):
    print(json.dumps({"skipped": reason}))
    sys.exit(3)


def main():
    if len(sys.argv) != 2:
        print("usage: perfetto-check.py TRACE.json", file=sys.stderr)
        sys.exit(2)
    path = sys.argv[1]
    try:
        from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig
        from perfetto.trace_processor.platform import PlatformDelegate
    except ImportError as e:
        skip(f"perfetto not installed (pip install perfetto): {e}")
    bin_path = os.environ.get("DAVINCI_TRACE_PROCESSOR") or None
    try:
        # The shell binary first: a failure here is a missing tool, not a bad trace.
        shell = PlatformDelegate().get_shell_path(bin_path=bin_path)
    except Exception as e:  # noqa: BLE001 - any failure to get the binary means "skipped"
        last = str(e).strip().splitlines()[-1:] or [type(e).__name__]
        skip(
            "perfetto's trace_processor_shell is not available (the package downloads it on "
            f"first use; set DAVINCI_TRACE_PROCESSOR to a local one): {last[0]}"
        )
    try:
        tp = TraceProcessor(trace=path, config=TraceProcessorConfig(bin_path=shell))
        slices = next(iter(tp.query("select count(*) as n from slice"))).n
        flows = next(iter(tp.query("select count(*) as n from flow"))).n
        problems = [
            {
                "name": r.name,
                "idx": r.idx,
                "severity": r.severity,
                "source": r.source,
                "value": r.value,
            }
            for r in tp.query(
                "select name, idx, severity, source, value from stats "
                "where severity in ('error', 'data_loss') and value > 0"
            )
        ]
        tp.close()
    except Exception as e:  # noqa: BLE001 - report whatever the trace processor said
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        sys.exit(1)
    print(json.dumps({"slices": slices, "flows": flows, "problems": problems}))


if __name__ == "__main__":
    main()
