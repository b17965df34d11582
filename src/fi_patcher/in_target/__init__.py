"""Scripts that run inside the target interpreter, never in fi-patch's own process.

fi-patch reads each as text and runs it with the target's python (`python -I -B -c <text>`):
`probe.py` (where the environment is), `preflight.py` (torch and nvcc, without importing
torch), `prove.py` (the runner of the patches' proofs, all in one process) and `proofs/` (one
proof per patch). Standard library only, except what a proof imports from the target itself,
and no syntax newer than Python 3.8. Each answers with framed JSON on stdout.
"""
