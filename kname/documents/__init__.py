"""Saved documents: the launch census (schema 1) and the GPU profile (schema 2), one home for both.

    schema.py        the two layouts, what makes one valid, their JSON text
    build.py         documents from the live census, from a join's GPU totals, and merged
    files.py         reading a saved document (one line per fault); atomic writes
    owner.py         which process writes the files, and where the others write theirs
    text.py          terminal-safe names, counted nouns, durations, aligned columns
    kernel_names.py  readable kernel names (demangled, without parameter lists)
    tables.py        a census by launches, a profile by GPU time
    diff.py          launches per call site and kernel, GPU time per call site, compared
    pytest_report.py the pytest plugin's report: each test's census, and the suite's
    report.py        `kname report`: tables, merges and diffs of saved files

The live census is kname.census, a stretch's census kname.stretch and kname.census_view, the
profiling session kname.profiling: they make documents; this package keeps, reads and shows them.
Nothing here imports a GPU library or a higher layer.
"""
