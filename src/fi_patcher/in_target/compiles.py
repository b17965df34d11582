# The compile check: run inside the target interpreter as `python -I -S compiles.py FILENAME
# OUTPUT`, with the text to check on stdin. Compiling imports nothing; a SyntaxError exits
# non-zero, and its message on stderr names FILENAME and the line.
#
# The text compiled is also the bytecode this interpreter would cache for it: OUTPUT receives
# the .pyc, hash-based and checked (PEP 552), so it is valid for exactly these bytes however
# and whenever they are written, and stdout names where the interpreter looks for it. An
# implementation that caches no bytecode writes nothing.
import importlib.util
import marshal
import sys

source = sys.stdin.buffer.read()
code = compile(source, sys.argv[1], "exec", dont_inherit=True)
try:
    cached = importlib.util.cache_from_source(sys.argv[1])
except NotImplementedError:
    sys.exit(0)
checked_hash = (0b11).to_bytes(4, "little")
with open(sys.argv[2], "wb") as output:
    output.write(importlib.util.MAGIC_NUMBER + checked_hash + importlib.util.source_hash(source))
    output.write(marshal.dumps(code))
print(cached)
