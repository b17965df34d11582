# Placed by the patch declared-ops-custom in flashinfer/utils.py, right after register_custom_op
# in the branch taken with torch >= 2.4; declared-ops-fake routes register_fake_op here too.
#
# FlashInfer declares ops with register_custom_op and register_fake_op, and both have returned
# the function unchanged since late 2024: a torch.library op makes every eager call pay the
# dispatcher. Here a declaration becomes a real op in the namespace fi_patch_declared (FlashInfer
# registers none there, so an upgrade cannot collide with it), and the declared name holds
# fi-patch's routing function (_fi_patch_routing): while torch.compile traces it, a call of that
# op; otherwise FlashInfer's function, as before.
# Only what can be right: a declaration made at module level, whose mutates_args fi-patch checked
# against the release's kernel (_fi_patch_checked, rendered from the patch's [[declarations]]),
# with a fake or nothing to return. Every other declaration stays as it is, and
# _fi_patch_declared says why, for the proof and for anyone who asks. An op that returns tensors
# gives them as the declared function does: never requiring grad (its kernel has no backward),
# and with its declared fake, or with fi-patch's own where FlashInfer's is wrong
# (_fi_patch_own_fakes, rendered from the [[declarations]] that say why).
import torch

_fi_patch_checked = {}  # rendered by fi-patch from the patch's [[declarations]]
_fi_patch_own_fakes = {}  # rendered by fi-patch from the patch's [[declarations]] (fake_why)
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
        self.traced = None
        self.split = {}
        self.routed = None


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
    split = _fi_patch_split(fn)
    untyped = _fi_patch_untyped(fn, split)
    if untyped:
        entry.reason = "torch cannot make it an op: %s" % untyped
        return fn
    refused = _fi_patch_unsplittable(fn, split, mutates, schema)
    if refused:
        entry.reason = "torch cannot make it an op: its tensor-or-number %s %s" % (
            ", ".join(split),
            refused,
        )
        return fn
    try:
        _fi_patch_declared_op(entry, mutates, device_types, schema, split)
    except Exception as exc:
        entry.reason = "torch cannot make it an op: %s" % (str(exc).strip().splitlines() or [""])[0]
        # Half made (0.6.0's rmsnorm_quant, annotated to return a tensor while it writes out,
        # takes no autograd formula): no fake declared later makes it ready.
        entry.custom = entry.op = entry.traced = None
        return fn
    if name in _fi_patch_fakes:
        _fi_patch_fake_op(name, _fi_patch_fakes.pop(name))
    # The routing function stands for the declared function from here on, ready or not: a fake
    # declared later makes the op ready. It is placed after this file, in flashinfer/utils.py
    # too, which declares nothing itself: every declaration comes later, from another module.
    return _fi_patch_routing(entry)  # noqa: F821


# The op of a declaration fi-patch checked: fi_patch_declared::NAME, FlashInfer's function its
# body, ready at once where it returns nothing (its fake returns None), else once a fake is
# declared; one that returns tensors gives them without gradient, as the eager call does.
def _fi_patch_declared_op(entry, mutates, device_types, schema, split):
    short = entry.name.split("::", 1)[-1]
    custom = torch.library.custom_op(
        "fi_patch_declared::" + short,
        _fi_patch_split_body(entry.fn, split) if split else entry.fn,
        mutates_args=mutates,
        device_types=device_types,
        schema=schema,
        tags=_fi_patch_tags(),  # noqa: F821 (placed after this file, as _fi_patch_routing)
    )
    entry.custom = custom
    entry.op = getattr(torch.ops.fi_patch_declared, short)
    entry.split = split
    entry.traced = _fi_patch_split_call(entry.fn, entry.op, split) if split else entry.op
    if not entry.op.default._schema.returns:
        custom.register_fake(_fi_patch_nothing)
        entry.ready = True
    else:
        # Placed after this file, as _fi_patch_routing is (below).
        custom.register_autograd(
            _fi_patch_boundary_no_grad,  # noqa: F821
            setup_context=_fi_patch_no_grad_setup,  # noqa: F821
        )
        entry.reason = "it returns tensors and no fake is declared for it"


def _fi_patch_nothing(*args, **kwargs):
    return None


# The first parameter typed as a union of several types, which no op schema holds (asked before
# torch is, which would log a warning at every import), but those split in two.
def _fi_patch_untyped(fn, split):
    import types
    import typing

    unions = (typing.Union, getattr(types, "UnionType", typing.Union))  # X | Y from Python 3.10
    for parameter, annotation in getattr(fn, "__annotations__", {}).items():
        if parameter in split:
            continue
        if typing.get_origin(annotation) in unions:
            kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(kinds) > 1:
                return "parameter %s is typed %s" % (parameter, annotation)
    return ""


# The parameters typed as a tensor or a number (rmsnorm_quant's `scale: Union[float, Tensor]`
# from 0.6.7), by name, with the number's type: the op takes each as two, an optional tensor and
# an optional number (NAME_number), as fi-patch's op boundaries do.
def _fi_patch_split(fn):
    split = {}
    for parameter, annotation in getattr(fn, "__annotations__", {}).items():
        number = _fi_patch_tensor_or_number(annotation)  # noqa: F821 (placed after this file)
        if parameter != "return" and number is not None:
            split[parameter] = number
    return split


# Why a split parameter cannot be split, or "": the op would write it, FlashInfer types the op by
# a schema of its own, or the function takes parameters the op's body cannot pass by name.
def _fi_patch_unsplittable(fn, split, mutates, schema):
    import inspect

    if not split:
        return ""
    if set(split) & set(mutates):
        return "is written"
    if schema is not None:
        return "is typed by its declared schema"
    kinds = [p.kind for p in inspect.signature(fn).parameters.values()]
    simple = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    if any(kind not in simple for kind in kinds):
        return "comes with positional-only or variadic parameters"
    return ""


# The op's body where a parameter is split: FlashInfer's function, called with the parameter one
# value again. Its parameters are the function's in order, each split one two, and carry no
# default: the traced call passes every one.
def _fi_patch_split_body(fn, split):
    import inspect
    import typing

    parameters = []
    for parameter in inspect.signature(fn).parameters.values():
        parameter = parameter.replace(default=parameter.empty, kind=parameter.POSITIONAL_OR_KEYWORD)
        if parameter.name in split:
            number = split[parameter.name]
            parameter = parameter.replace(annotation=typing.Optional[torch.Tensor])
            parameters.append(parameter)
            parameter = parameter.replace(
                name=parameter.name + "_number", annotation=typing.Optional[number]
            )
        parameters.append(parameter)
    names = [p.name for p in parameters]

    def run(*values):
        named = dict(zip(names, values))
        for name in split:
            number = named.pop(name + "_number")
            if named[name] is None:
                named[name] = number
        return fn(**named)

    run.__signature__ = inspect.Signature(
        parameters, return_annotation=inspect.signature(fn).return_annotation
    )
    return run


# While torch.compile traces the declared function: its arguments bound as Python binds them
# (TypeError where Python raises one), each split one passed as a tensor or as a number, then
# the op.
def _fi_patch_split_call(fn, op, split):
    import inspect

    parameters = list(inspect.signature(fn).parameters.values())
    names = tuple(p.name for p in parameters)
    # A parameter the caller must pass: _FiPatchRequired, placed after this file.
    required = _FiPatchRequired  # noqa: F821
    defaults = tuple(required if p.default is p.empty else p.default for p in parameters)
    positional = sum(p.kind != p.KEYWORD_ONLY for p in parameters)
    at = [names.index(name) for name in split]
    called = fn.__name__

    def traced(*args, **kwargs):
        values = _fi_patch_boundary_bind(  # noqa: F821 (placed after this file)
            called, names, defaults, positional, args, kwargs
        )
        passed = []
        for index, value in enumerate(values):
            if index in at:
                tensor = isinstance(value, torch.Tensor)
                passed += [value, None] if tensor else [None, value]
            else:
                passed.append(value)
        return op(*passed)

    return traced


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
        own = _fi_patch_own_fakes.get(name)
        if entry is None:
            _fi_patch_fakes[name] = function
        elif entry.custom is None:
            pass
        elif own is not None:
            entry.custom.register_fake(_fi_patch_declared_fakes[name])
            entry.reason = "FlashInfer's fake is replaced by fi-patch's: %s" % own
            entry.ready = True
        elif entry.split:
            # FlashInfer's fake takes each split parameter as one: fi-patch's stands where the
            # op returns nothing, and none where it returns tensors.
            entry.reason = "its declared fake takes %s as one parameter%s" % (
                ", ".join(entry.split),
                "" if entry.op.default._schema.returns else ": fi-patch's fake stands in",
            )
        elif _fi_patch_fits(function, entry):
            entry.custom.register_fake(function)
            entry.reason = ""
            entry.ready = True
        elif not entry.op.default._schema.returns:
            # It returns nothing: fi-patch's fake (set when the op was made) stands.
            entry.reason = "its declared fake takes other parameters: fi-patch's fake stands in"
        else:
            entry.reason = "its declared fake takes other parameters than the op"
        return function

    if fn is None:
        return declare
    return declare(fn)


# fi-patch's fakes for the ops whose declared fake is wrong (the rows of _fi_patch_own_fakes say
# how): each allocates what the declared function allocates, in every release that declares it.


# merge_state: v_merged like v_a, s_merged like s_a once converted to float32.
def _fi_patch_fake_merge_state(v_a, s_a, v_b, s_b):
    return torch.empty_like(v_a), torch.empty_like(s_a, dtype=torch.float32)


# merge_states: (seq_len, num_heads, head_dim) of v's dtype and (seq_len, num_heads) float32, on
# v's device.
def _fi_patch_fake_merge_states(v, s):
    seq_len, _, num_heads, head_dim = v.size()
    return (
        v.new_empty((seq_len, num_heads, head_dim)),
        v.new_empty((seq_len, num_heads), dtype=torch.float32),
    )


_fi_patch_declared_fakes = {
    "flashinfer::merge_state": _fi_patch_fake_merge_state,
    "flashinfer::merge_states": _fi_patch_fake_merge_states,
}
