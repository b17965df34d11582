# Placed by the patch declared-ops-custom in flashinfer/utils.py, right after register_custom_op
# in the branch taken with torch >= 2.4; declared-ops-fake routes register_fake_op here too.
#
# FlashInfer declares ops with register_custom_op and register_fake_op, and both have returned
# the function unchanged since late 2024: a torch.library op makes every eager call pay the
# dispatcher. Here a declaration becomes a real op in the namespace fi_patch_declared (FlashInfer
# registers none there, so an upgrade cannot collide with it), and Dynamo traces a call of that
# op where it meets the declared function; an eager call runs FlashInfer's function as before.
# Only what can be right: a declaration made at module level, whose mutates_args fi-patch checked
# against the release's kernel (_fi_patch_checked, rendered from the patch's [[declarations]]),
# with a fake or nothing to return. Every other declaration stays as it is, and
# _fi_patch_declared says why, for the proof and for anyone who asks.
import torch

_fi_patch_checked = {}  # rendered by fi-patch from the patch's [[declarations]]
_fi_patch_declared = {}
_fi_patch_fakes = {}


# One declaration: FlashInfer's function, the op made of it (or why none), and whether the
# traced branch is taken (an op with its fake, or one that returns nothing).
class _FiPatchDeclaration(object):
    def __init__(self, name, fn):
        self.name = name
        self.fn = fn
        self.op = None
        self.custom = None
        self.ready = False
        self.reason = ""


def _fi_patch_custom_op(name, fn, mutates_args, device_types, schema):
    import sys

    # register_custom_op's caller: a module being imported, or a function (a module getter).
    at_module_level = sys._getframe(2).f_code.co_name == "<module>"

    def declare(function):
        return _fi_patch_declare(
            name, function, mutates_args, device_types, schema, at_module_level
        )

    if fn is None:
        return declare
    return declare(fn)


def _fi_patch_declare(name, fn, mutates_args, device_types, schema, at_module_level):
    entry = _FiPatchDeclaration(name, fn)
    if not at_module_level:
        entry.reason = "declared inside a function, a module getter: each call declares it again"
        if name not in _fi_patch_declared:
            _fi_patch_declared[name] = entry
        return fn
    _fi_patch_declared[name] = entry
    declared = (mutates_args,) if isinstance(mutates_args, str) else tuple(mutates_args)
    checked = _fi_patch_checked.get(name)
    if checked is None:
        entry.reason = "fi-patch has not checked its mutates_args against the kernel"
        return fn
    if declared not in checked:
        entry.reason = "it declares mutates_args %r; fi-patch checked %s" % (
            declared,
            " or ".join(repr(k) for k in checked),
        )
        return fn
    mutates = checked[declared]
    if isinstance(mutates, str):
        entry.reason = mutates
        return fn
    untyped = _fi_patch_untyped(fn)
    if untyped:
        entry.reason = "torch cannot make it an op: %s" % untyped
        return fn
    short = name.split("::", 1)[-1]
    try:
        custom = torch.library.custom_op(
            "fi_patch_declared::" + short,
            fn,
            mutates_args=mutates,
            device_types=device_types,
            schema=schema,
        )
    except Exception as exc:
        entry.reason = "torch cannot make it an op: %s" % (str(exc).strip().splitlines() or [""])[0]
        return fn
    entry.custom = custom
    entry.op = getattr(torch.ops.fi_patch_declared, short)
    if not entry.op.default._schema.returns:
        custom.register_fake(_fi_patch_nothing)
        _fi_patch_route(entry)
    else:
        entry.reason = "it returns tensors and no fake is declared for it"
    if name in _fi_patch_fakes:
        _fi_patch_fake_op(name, _fi_patch_fakes.pop(name))
    return fn


# Dynamo traces a function's `_torchdynamo_inline` in its place (torch.jit's and Dynamo's own
# wrappers rely on it): here, a call of the op. Python never looks at the attribute, so an eager
# call runs FlashInfer's function itself, with nothing in between, and nothing is imported.
def _fi_patch_route(entry):
    op = entry.op

    def traced(*args, **kwargs):
        return op(*args, **kwargs)

    entry.fn._torchdynamo_inline = traced
    entry.ready = True


def _fi_patch_nothing(*args, **kwargs):
    return None


# The first parameter typed as a union of several types, which no op schema holds (asked before
# torch is, which would log a warning at every import).
def _fi_patch_untyped(fn):
    import types
    import typing

    unions = (typing.Union, getattr(types, "UnionType", typing.Union))  # X | Y from Python 3.10
    for parameter, annotation in getattr(fn, "__annotations__", {}).items():
        if typing.get_origin(annotation) in unions:
            kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(kinds) > 1:
                return "parameter %s is typed %s" % (parameter, annotation)
    return ""


# Whether `fake` takes the op's parameters, as the op passes them.
def _fi_patch_fits(fake, entry):
    import inspect

    arguments = entry.op.default._schema.arguments
    positional = [a for a in arguments if not getattr(a, "kwarg_only", False)]
    named = {a.name: None for a in arguments if getattr(a, "kwarg_only", False)}
    try:
        inspect.signature(fake).bind(*range(len(positional)), **named)
    except TypeError:
        return False
    return True


def _fi_patch_fake_op(name, fn):
    def declare(function):
        entry = _fi_patch_declared.get(name)
        if entry is None:
            _fi_patch_fakes[name] = function
        elif entry.custom is None:
            pass
        elif _fi_patch_fits(function, entry):
            entry.custom.register_fake(function)
            entry.reason = ""
            _fi_patch_route(entry)
        elif not entry.op.default._schema.returns:
            # It returns nothing: fi-patch's fake (set when the op was made) stands.
            entry.reason = "its declared fake takes other parameters: fi-patch's fake stands in"
        else:
            entry.reason = "its declared fake takes other parameters than the op"
        return function

    if fn is None:
        return declare
    return declare(fn)
