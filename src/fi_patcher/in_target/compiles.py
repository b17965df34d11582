# The compile check: run inside the target interpreter as `python -I -S compiles.py FILENAME
# OUTPUT`, with the text to check on stdin. Compiling imports nothing; a SyntaxError exits
# non-zero, and its message on stderr names FILENAME and the line.
#
# The text compiled is also the bytecode this interpreter would cache for it: OUTPUT receives
# the .pyc, hash-based and checked (PEP 552), so it is valid for exactly these bytes however
# and whenever they are written, and stdout names where the interpreter looks for it. Where
# that cannot be made (an implementation that caches no bytecode), stdout stays empty: the
# text compiled, and there is no bytecode to write.
import importlib.util
import marshal
import sys

source = sys.stdin.buffer.read()
code = compile(source, sys.argv[1], "exec", dont_inherit=True)
try:
    cached = importlib.util.cache_from_source(sys.argv[1])
    checked_hash = (0b11).to_bytes(4, "little")
    header = importlib.util.MAGIC_NUMBER + checked_hash + importlib.util.source_hash(source)
    with open(sys.argv[2], "wb") as output:
        output.write(header + marshal.dumps(code))
except Exception:
    sys.exit(0)
print(cached)
