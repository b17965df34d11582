# The compile check: run inside the target interpreter as `python -I -S compiles.py FILENAME`,
# with the text to check on stdin. Compiling imports nothing; a SyntaxError exits non-zero, and
# its message on stderr names FILENAME and the line.
import sys

compile(sys.stdin.buffer.read(), sys.argv[1], "exec", dont_inherit=True)
