"""Scripts that run inside the target interpreter, never in fi-patch's own process.

fi-patch runs each by its file's path with the target's python (`python -I -B .../probe.py`),
never as `-c` text, so a process list shows a short command: `probe.py` (where the environment
is), `imports.py` (where a normal start imports from), `preflight.py` (torch and nvcc, without
importing torch), `compiles.py` (the patched text compiles), `prove.py` (the runner of the
patches' proofs, a share of them in each process) and `proofs/` (one proof per patch, sent to
`prove.py` as text). Under `-I` the script's own folder is not on `sys.path`, so nothing here
can shadow the target's modules. Standard library only, except what a proof imports from the
target itself, and no syntax newer than Python 3.8. Each answers with framed JSON on stdout.
"""
