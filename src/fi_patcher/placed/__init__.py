"""Code fi-patch places in FlashInfer's files: real Python, read by ruff and the tests, placed as
text by a patch whose definitions name the file (`definitions_from` in its TOML). Comments
above a file's first statement stay here; every statement below them is placed. Like
`in_target`, it runs in the target's interpreter: no syntax newer than Python 3.8, and names
that start with `_fi_patch_` so that nothing of FlashInfer's is shadowed. No string spans
lines: placed in an indented block, its value would change.
"""
