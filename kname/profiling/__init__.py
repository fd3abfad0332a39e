"""`kname profile`: GPU time per call site, from CUPTI's activity records.

Two streams meet here. At each launch API call (cuLaunchKernel, cudaLaunchKernel, cuGraphLaunch,
cudaMemcpy...) a CUPTI callback captures the call site by kname's rules and records it under the
call's correlation id (capture.py). Later CUPTI hands over activity records (kernels, copies,
sets) that carry the same correlation id and their device start and end times. The join
(join.py) attributes each record to its site and sums GPU time per site and per kernel.

    records.py          launch and activity records; the recorded streams as JSON fixtures
    join.py             correlation id -> site, the per-site and per-kernel totals
    graphs.py           CUDA graph node -> the line that made it (a replayed kernel's site)
    trace.py            Chrome trace-event JSON (Perfetto, chrome://tracing)
    capture.py          the rules both callbacks follow: launch API calls -> launch records;
                        cupti-python's objects -> records
    cupti_collector.py  the CUPTI session (subscription, activity buffers, flush), imported only
                        when profiling starts; it chooses the callback
    native_callback.py  the callback in C (kname._native_cupti's Recorder), with native_join.py
                        and native_trace.py, its join and trace read from C
    python_callback.py  cupti-python's callback, the pure-Python fallback
    memory.py           memory per line (--memory): allocations and frees -> bytes, peaks
    memory_join.py      the driver's view: memory API calls and CUPTI's memory records joined
    memory_hooks.py     the pools' views: torch's and CuPy's allocator hooks
    torch_tracker.py    torch's allocator trace tracker, compiled on first use (C++, no GIL)
    backward.py         scopes: autograd's launches named after the line that started a backward
                        pass, XLA's after the line that compiled or ran (the jax unit's)
    session.py          a profiling session: start, stop, outputs (what kname.profile() returns)
    mode.py             KNAME_MODE=profile: the process's session and its outputs at exit

The document a profile is saved as (schema 2), its table, its page, its diff and `kname report`
are kname.documents, shared with the launch census.

Nothing here is imported by `import kname`: install() in profile mode and kname.profile() import
what they use.
"""
