# Placed by the patch declared-ops-custom in flashinfer/utils.py, after declared_ops.py, in the
# branch taken with torch >= 2.4: fi-patch's op boundary for FlashInfer's public entry points.
#
# Each op-* patch places one call of _fi_patch_boundary right after its entry point (say
# silu_and_mul), naming the op, the fake and, where the entry point takes one, its out parameter.
# From the entry point's own signature this makes fi_patch::NAME, a torch.library op whose body
# calls the entry point eagerly (every host step, workspace, autotuner, capture check and backend
# choice runs there, as before), and, where there is an out parameter, fi_patch::NAME_out, which
# writes into it. The entry point's name in its module then holds fi-patch's routing function
# (_fi_patch_routing, in declared_ops.py): while torch.compile traces it, one call of the op;
# otherwise FlashInfer's function itself. An entry point torch cannot make an op of stays as it
# is, and _fi_patch_boundaries says why, for the proof and for anyone who asks.
#
# The fakes, by name, take the arguments by parameter name, the rule the shape names (how that
# release checks its input) and, where the patch names one, FlashInfer's own check of the
# problem (a function of the entry point's module, run on the fake tensors as the entry point
# runs it): each gives the shapes, strides and dtypes the entry point returns, and raises what
# it raises on input it refuses.
#
# Annotations are strings: the host's Python (3.8 for older releases) never evaluates them, and
# mypy reads them.
import itertools
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch

_fi_patch_boundaries: "Dict[str, _FiPatchBoundary]" = {}


# One entry point: FlashInfer's function, the ops made of it (or why none), and its parameters:
# all of them in order (`names`), those the op leaves to their default (`kept`: torch has no
# schema type for them), those typed by an IntEnum, passed to the op as int (`enums`), those
# typed as a tensor or a number, passed to the op as two (`split`: the number's parameter, named
# NAME_number), those typed as a tensor or a pair of tensors, passed to the op as two (`pairs`: the
# pair's second tensor, named NAME_pair, None for a tensor alone: the routed MoE's topk_ids), and
# the flag that makes the entry point return all its outputs, not the first
# alone (`flag`: the op always asks for them all), and the values of the parameters the op carries
# one value of only (`only`: backend "cuda", gemm1_lora_delta None; another value is traced as
# the function's body), the
# sequences FlashInfer compares with tuples (`tuples`), and the values that make a call's body one
# a CUDA graph cannot capture (`uncapturable`: seed "none" where it is None, check_nan "true"
# where it is true): such a call is the op NAME_uncapturable, tagged cudagraph_unsafe. The
# parameters an entry point writes (`writes`: concat_mla_k's k, the trtllm MoE's
# routing_replay_out and workspace_buffer) its ops declare written; an entry point that returns
# nothing (`returns` 0) is an op that returns nothing, and one that returns its output and writes
# optional parameters has the op NAME_writes for a call that passes one of them. An entry point
# that returns its outputs in a list (`listed`: trtllm_fp4_block_scale_moe,
# trtllm_mxint4_block_scale_moe, one; cutlass_fused_moe, four, and one before 0.3.0, where its
# shapes name their own returns and check) has an op that returns the tensors,
# and its routing function gives the list back; where it returns more than one and one of them is
# its out parameter (cutlass_fused_moe's output, first), its out op writes that and returns the
# others.
class _FiPatchBoundary(object):
    def __init__(self, name: "str", fn: "Any") -> "None":
        self.name = name
        self.fn = fn
        self.op: "Any" = None
        self.out_op: "Any" = None
        self.names: "Tuple[str, ...]" = ()
        self.defaults: "Tuple[Any, ...]" = ()
        self.positional = 0
        self.kept: "Tuple[str, ...]" = ()
        self.enums: "Dict[str, Any]" = {}
        self.split: "Dict[str, str]" = {}
        self.pairs: "Dict[str, str]" = {}
        self.flag = ""
        self.only: "Dict[str, Any]" = {}
        self.ready = False
        self.reason = ""
        self.traced: "Any" = None
        self.routed: "Any" = None
        self.tuples: "Tuple[str, ...]" = ()
        self.uncapturable: "Dict[str, str]" = {}
        self.writes: "Tuple[str, ...]" = ()
        self.listed = False
        self.returns = 1
        self.kinds: "Dict[str, Any]" = {}
        self.method = False
        self.allocated: "Any" = None
        self.op_names: "Tuple[str, ...]" = ()
        self.outputs = 1
        self.aliases: "List[_FiPatchBoundary]" = []
        self.aliased = False
        self.refuses = False


# A parameter the caller must pass: it has no default.
class _FiPatchRequired(object):
    pass


# The types a patch may give a parameter FlashInfer left unannotated, or annotated with a type no
# op schema holds (trtllm_batch_decode_with_kv_cache's out, a tensor or an FP4Tensor; its sinks,
# annotated a list of tensors and passed as one tensor; its out_dtype, a dtype or "nvfp4"): a
# traced call that passes another kind traces the function's own body. A "pair" is a tensor or a
# pair of tensors (kv_cache_sf).
_fi_patch_named_types = {
    "Tensor": torch.Tensor,
    "int": int,
    "float": float,
    "bool": bool,
    "str": str,
    "dtype": torch.dtype,
    "pair": Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]],
}


def _fi_patch_boundary(
    fn: "Any",
    name: "str",
    fake: "str",
    rule: "str" = "",
    out: "str" = "",
    returns: "int" = 1,
    check: "str" = "",
    types: "Optional[Dict[str, str]]" = None,
    returns_when: "str" = "",
    only: "Optional[Dict[str, Any]]" = None,
    uncapturable: "Optional[Dict[str, str]]" = None,
    writes: "Tuple[str, ...]" = (),
    listed: "bool" = False,
    given: "bool" = False,
) -> "Any":
    if given:
        # Its outputs given or allocated as a method's are (trtllm_batch_decode_with_kv_cache's
        # out and lse), without a wrapper's key.
        made = _fi_patch_method_entry(
            fn,
            name,
            fake,
            rule,
            out,
            returns,
            check,
            types,
            returns_when,
            only,
            writes,
            1,
            {},
            keyed=False,
        )
        if made.routed is not None:
            _fi_patch_in_place(fn, made.routed)
        return made.routed or fn
    entry = _FiPatchBoundary(name, fn)
    entry.flag = returns_when
    entry.writes = tuple(writes)
    entry.listed = listed
    entry.returns = returns
    entry.only = dict(only or {})
    entry.uncapturable = dict(uncapturable or {})

    def make(checking: "Any") -> "None":
        made = _fi_patch_boundary_fakes[fake]
        _fi_patch_make_boundary(entry, made, rule, checking, out, returns, types or {})

    _fi_patch_entry_made(entry, check, fake, rule, make)
    return entry.routed or fn


# The entry registered by its op's name, then its ops made by `make`, given FlashInfer's own check
# (`check`, by name): where the entry point calls a check its module does not have, fi-patch has
# no such rule of the fake, or torch cannot make the op, the entry says why instead, and its
# function stays as it is. A text that has no such check and does not call it checks nothing
# (the trtllm MoE before 0.6.8, which has no routing_replay_out and no
# _validate_routing_replay_out).
def _fi_patch_entry_made(
    entry: "_FiPatchBoundary", check: "str", fake: "str", rule: "str", make: "Any"
) -> "None":
    import inspect

    _fi_patch_boundaries[entry.name] = entry
    try:
        checking = _fi_patch_boundary_check(entry.fn, check)
        if check and checking is None and check in inspect.unwrap(entry.fn).__code__.co_names:
            entry.reason = "its module has no function %s" % check
        elif rule not in _fi_patch_boundary_rules.get(fake, ()):
            entry.reason = "fi-patch has no fake %r with the rule %r" % (fake, rule)
        else:
            make(checking)
    except Exception as exc:
        entry.reason = "torch cannot make it an op: %s" % (str(exc).strip().splitlines() or [""])[0]


# FlashInfer's own check of the problem, by name, in the entry point's module.
def _fi_patch_boundary_check(fn: "Any", check: "str") -> "Any":
    import inspect

    if not check:
        return None
    found = inspect.unwrap(fn).__globals__.get(check)
    return found if callable(found) else None


# The op's parameters: each of the entry point's, typed by its annotation (or, unannotated, by
# the patch's `types`), but those torch has no type for that have a default: the op leaves them
# to it. A tensor or a number (`top_p: Union[torch.Tensor, float]`) is two: an optional tensor
# and an optional number. The flag (`entry.flag`) is no parameter of the op, which passes it
# true. `out` is the parameter the entry point writes into, where this text has it.
def _fi_patch_make_boundary(
    entry: "_FiPatchBoundary",
    fake: "_FiPatchFake",
    rule: "str",
    check: "Any",
    out: "str",
    returns: "int",
    types: "Dict[str, str]",
) -> "None":
    typed = _fi_patch_parameters(entry, types, out)
    if typed is None:
        return
    if entry.flag and (entry.flag not in entry.names or returns < 2):
        entry.reason = "it has no flag %s that returns %d outputs" % (entry.flag, returns)
        return
    # The parameters it writes that this text has (routing_replay_out from 0.6.8).
    entry.writes = tuple(w for w in entry.writes if w in entry.names)
    unwritable = [w for w in entry.writes if w not in [p.name for p in typed]]
    if unwritable:
        entry.reason = "it has no tensor parameter %s to write" % ", ".join(unwritable)
        return
    # A parameter the op carries one value of, where this text has it (backend from 0.6.8).
    entry.only = {k: v for k, v in entry.only.items() if k in entry.names}
    entry.uncapturable = {k: v for k, v in entry.uncapturable.items() if k in entry.names}
    passed = [p.name for p in typed]
    out = out if out in passed else ""
    _fi_patch_make_ops(entry, typed, fake, rule, check, out, returns)
    _fi_patch_boundary_route(entry, passed.index(out) if out else -1)


# The entry point's parameters in order (`entry.names`, their defaults, how many may be passed
# positionally, those the op leaves to their default, those passed as int or split), and the op's
# typed parameters; None, with `entry.reason`, where no op schema holds one.
def _fi_patch_parameters(
    entry: "_FiPatchBoundary", types: "Dict[str, str]", out: "str"
) -> "Optional[List[Any]]":
    import inspect
    import typing

    hints = typing.get_type_hints(entry.fn)
    names: "List[str]" = []
    defaults: "List[Any]" = []
    typed: "List[inspect.Parameter]" = []
    positional = 0
    for index, parameter in enumerate(inspect.signature(entry.fn).parameters.values()):
        # A method's self is the wrapper the op's key names; its *args (extra arguments for a
        # custom kernel) the op carries empty.
        if entry.method and (index == 0 or parameter.kind == parameter.VAR_POSITIONAL):
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            entry.reason = "it takes *%s, which no op schema holds" % parameter.name
            return None
        if parameter.kind == parameter.POSITIONAL_ONLY:
            entry.reason = "parameter %s is positional only" % parameter.name
            return None
        positional += parameter.kind != parameter.KEYWORD_ONLY
        names.append(parameter.name)
        default = parameter.default
        defaults.append(_FiPatchRequired if default is parameter.empty else default)
        annotation = hints.get(parameter.name, parameter.empty)
        if parameter.name in types:
            annotation = _fi_patch_named_types[types[parameter.name]]
        if parameter.name == entry.flag:
            continue
        made = _fi_patch_parameter(entry, parameter, annotation, out)
        if made is None:
            entry.reason = "parameter %s is typed %s, which no op schema holds" % (
                parameter.name,
                hints.get(parameter.name, "nothing"),
            )
            return None
        typed += made
    entry.names, entry.defaults, entry.positional = tuple(names), tuple(defaults), positional
    return typed


# One parameter as the op takes it: one typed parameter, two (a tensor or a number; a tensor or a
# pair of tensors), none (left to its default), or None where no op schema holds it.
def _fi_patch_parameter(
    entry: "_FiPatchBoundary", parameter: "Any", annotation: "Any", out: "str"
) -> "Optional[List[Any]]":
    import inspect
    import typing

    name, default = parameter.name, parameter.default
    enum = _fi_patch_int_enum(annotation)
    if enum is not None:
        entry.enums[name] = enum
    if _fi_patch_tensor_or_pair(annotation) or name in entry.pairs:
        entry.pairs[name] = name + "_pair"
        first: "Any" = typing.Optional[torch.Tensor] if default is None else torch.Tensor
        return [
            inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=first),
            inspect.Parameter(
                name + "_pair",
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=typing.Optional[torch.Tensor],
            ),
        ]
    number = _fi_patch_tensor_or_number(annotation)
    if number is not None:
        entry.split[name] = name + "_number"
        halves = ((name, torch.Tensor), (name + "_number", number))
        return [
            inspect.Parameter(
                half,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                annotation=typing.Optional[kind],
            )
            for half, kind in halves
        ]
    kind = _fi_patch_op_type(annotation, default)
    if kind is None:
        if default is parameter.empty:
            return None
        entry.kept += (name,)
        return []
    if name == out:
        kind = typing.Optional[torch.Tensor]
    if _fi_patch_is_tuple(annotation):
        entry.tuples += (name,)
    plain = typing.get_args(kind)[0] if typing.get_origin(kind) is typing.Union else kind
    if plain in (int, float, torch.Tensor, torch.dtype):
        entry.kinds[name] = plain
    return [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=kind)]


# The tags every op of fi-patch's carries: its inputs' strides kept as the caller's
# (needs_exact_strides; needs_fixed_stride_order on a torch without it), since FlashInfer
# branches on them (fp4_quantize's outputs follow stride(-2)). A call form whose body a CUDA
# graph cannot capture also carries cudagraph_unsafe, which keeps it out of Inductor's CUDA
# graphs, and nondeterministic_seeded: its outputs follow the device generator's state, so no
# two such calls are one (common-subexpression elimination would merge them).
def _fi_patch_tags(uncapturable: "bool" = False) -> "Tuple[Any, ...]":
    strides = getattr(torch.Tag, "needs_exact_strides", None)
    tags = [strides if strides is not None else torch.Tag.needs_fixed_stride_order]
    if uncapturable:
        tags += [torch.Tag.cudagraph_unsafe, torch.Tag.nondeterministic_seeded]
    return tuple(tags)


# fi_patch::NAME (and NAME_out, NAME_uncapturable where the entry point has them), each calling
# the entry point eagerly with the arguments joined again, with the fake and no autograd. Where
# the entry point writes its parameters (`entry.writes`), its ops declare them written:
# fi_patch::NAME where it returns nothing (`returns` 0), else NAME_writes (for a call that passes
# one of them), and NAME_out.
def _fi_patch_make_ops(
    entry: "_FiPatchBoundary",
    typed: "List[Any]",
    fake: "_FiPatchFake",
    rule: "str",
    check: "Any",
    out: "str",
    returns: "int",
) -> "None":
    import inspect
    import typing

    fn, passed = entry.fn, [p.name for p in typed]
    result: "Any" = torch.Tensor if returns == 1 else typing.Tuple[(torch.Tensor,) * returns]
    if returns == 0:
        result = None

    def run(*values: "Any") -> "Any":
        returned = fn(**_fi_patch_arguments(entry, passed, values))
        if entry.listed:
            return returned[0] if returns == 1 else tuple(returned)
        return returned

    def faked(*values: "Any") -> "Any":
        return fake(_fi_patch_joined(entry, passed, values), rule, check)

    run.__signature__ = inspect.Signature(typed, return_annotation=result)  # type: ignore[attr-defined]
    # An op that returns its output and writes optional parameters is two: fi_patch::NAME, which
    # writes none of them (a call that passes none), and NAME_writes, which declares them all
    # written. Inductor (torch 2.14) cannot lower an op whose written arguments are all None
    # while it returns a tensor.
    twin = bool(entry.writes) and returns > 0
    made: "List[Tuple[str, Any, Tuple[str, ...], bool]]" = [
        ("", run, () if twin else entry.writes, False)
    ]
    if twin:
        made.append(("_writes", run, entry.writes, False))
    if entry.uncapturable:
        made.append(("_uncapturable", run, (), True))
    if out:
        # A listed entry point of several outputs gives the others back beside its out.
        rest = returns - 1 if entry.listed and returns > 1 else 0

        def run_out(*values: "Any") -> "Any":
            returned = fn(**_fi_patch_arguments(entry, passed, values))
            if rest:
                return returned[1] if rest == 1 else tuple(returned[1:])
            return None

        written = [p.replace(annotation=torch.Tensor) if p.name == out else p for p in typed]
        others: "Any" = None
        if rest:
            others = torch.Tensor if rest == 1 else typing.Tuple[(torch.Tensor,) * rest]
        run_out.__signature__ = inspect.Signature(written, return_annotation=others)  # type: ignore[attr-defined]
        made.append(("_out", run_out, (out, *entry.writes), False))
    for suffix, body, mutates, uncapturable in made:
        op = torch.library.custom_op(
            "fi_patch::" + entry.name + suffix,
            body,
            mutates_args=mutates,
            tags=_fi_patch_tags(uncapturable),
        )
        op.register_fake(faked)
        # FlashInfer's kernels have no backward, and the tensors they return never require
        # grad: nor do the op's, so that a compiled graph with an input that requires grad
        # traces as the eager call runs. (torch takes no autograd formula for an op that writes
        # its input: the out= op has none.)
        if not mutates:
            op.register_autograd(_fi_patch_boundary_no_grad, setup_context=_fi_patch_no_grad_setup)


# The entry point's arguments again, from the op's: a split parameter one value (a pair a tuple
# of its two tensors), the flag true.
def _fi_patch_joined(
    entry: "_FiPatchBoundary", passed: "List[str]", values: "Tuple[Any, ...]"
) -> "Dict[str, Any]":
    named = dict(zip(passed, values))
    for name, number in entry.split.items():
        value = named.pop(number)
        if named[name] is None:
            named[name] = value
    for name, second in entry.pairs.items():
        value = named.pop(second)
        if value is not None:
            named[name] = (named[name], value)
    if entry.flag:
        named[entry.flag] = True
    return named


# As `_fi_patch_joined`, for the entry point itself: an op schema holds a sequence as a list
# (FlashInfer compares some with tuples) and an IntEnum as an int (FlashInfer reads its members).
def _fi_patch_arguments(
    entry: "_FiPatchBoundary", passed: "List[str]", values: "Tuple[Any, ...]"
) -> "Dict[str, Any]":
    named = _fi_patch_joined(entry, passed, values)
    for name in entry.tuples:
        if named[name] is not None:
            named[name] = tuple(named[name])
    for name, enum in entry.enums.items():
        if named.get(name) is not None:
            named[name] = enum(named[name])
    return named


def _fi_patch_no_grad_setup(ctx: "Any", inputs: "Any", output: "Any") -> "None":
    outputs = output if isinstance(output, (tuple, list)) else [output]
    ctx.mark_non_differentiable(*[o for o in outputs if isinstance(o, torch.Tensor)])
    ctx.inputs = len(inputs)


def _fi_patch_boundary_no_grad(ctx: "Any", *grads: "Any") -> "Any":
    return (None,) * ctx.inputs


# The types a union annotation names, None left out (Optional[X] is [X]), or None for another
# annotation.
def _fi_patch_union_members(annotation: "Any") -> "Optional[List[Any]]":
    import types
    import typing

    unions = (typing.Union, getattr(types, "UnionType", typing.Union))  # X | Y from Python 3.10
    if typing.get_origin(annotation) not in unions:
        return None
    return [a for a in typing.get_args(annotation) if a is not type(None)]


# The number type of an annotation that is a tensor or a number (optional or not), or None.
def _fi_patch_tensor_or_number(annotation: "Any") -> "Any":
    kinds = _fi_patch_union_members(annotation) or []
    numbers = [k for k in kinds if k in (int, float)]
    if len(kinds) != 2 or torch.Tensor not in kinds or len(numbers) != 1:
        return None
    return numbers[0]


# Whether an annotation is a tensor or a pair of tensors (Union[Tensor, Tuple[Tensor, Tensor]]).
def _fi_patch_tensor_or_pair(annotation: "Any") -> "bool":
    import typing

    kinds = _fi_patch_union_members(annotation) or []
    pairs = [k for k in kinds if typing.get_origin(k) is tuple]
    if len(kinds) != 2 or torch.Tensor not in kinds or len(pairs) != 1:
        return False
    return typing.get_args(pairs[0]) == (torch.Tensor, torch.Tensor)


def _fi_patch_is_tuple(annotation: "Any") -> "bool":
    import typing

    kinds = [annotation, *typing.get_args(annotation)]
    return any(typing.get_origin(k) is tuple for k in kinds)


# While torch.compile traces the entry point, its routing function calls `traced`: the arguments
# bound as Python binds them (TypeError where Python raises one), then one op. A call that passes
# a parameter the op leaves to its default raises TypeError while tracing, naming it: a fullgraph
# compile stops there; any other runs that call eagerly. A call with another value of a
# parameter the op carries one value of (`only`, None among them) is traced as the entry point's
# own body, as unpatched, and so is a call that passes a tensor where the op takes a number, or
# anything but a tensor where it takes one (`kinds`: single_prefill_with_kv_cache's v_scale is
# annotated a float, and a tensor scales as well eagerly). A pair is passed as its two tensors, a
# tensor alone as itself and None; anything but a pair of two raises what Python's unpacking
# raises.
def _fi_patch_boundary_route(entry: "_FiPatchBoundary", at: "int") -> "None":
    name, names, defaults, positional = entry.name, entry.names, entry.defaults, entry.positional
    kept = [names.index(k) for k in entry.kept]
    enums = [names.index(e) for e in entry.enums]
    split = [names.index(s) for s in entry.split]
    pairs = [names.index(p) for p in entry.pairs]
    flag = names.index(entry.flag) if entry.flag else -1
    only = [(names.index(k), v) for k, v in entry.only.items()]
    kinds = [(names.index(k), v) for k, v in entry.kinds.items()]
    # Another value of a parameter with one value, or a value the op's schema cannot take: the
    # entry point's own body is traced.
    body = entry.fn
    # Errors name the function the caller called (the op may be named otherwise).
    called = getattr(entry.fn, "__name__", name)
    op = getattr(torch.ops.fi_patch, name)
    out_op = getattr(torch.ops.fi_patch, name + "_out") if at >= 0 else None
    unsafe_op = getattr(torch.ops.fi_patch, name + "_uncapturable", None)
    writes_op = getattr(torch.ops.fi_patch, name + "_writes", None)
    written = [names.index(w) for w in entry.writes]
    unsafe = [(names.index(k), v) for k, v in entry.uncapturable.items()]
    listed, several = entry.listed, entry.listed and entry.returns > 1

    def traced(*args: "Any", **kwargs: "Any") -> "Any":
        values = _fi_patch_boundary_bind(called, names, defaults, positional, args, kwargs)
        if any(_fi_patch_other(values[i], value) for i, value in only):
            return body(*args, **kwargs)
        if any(_fi_patch_mistyped(values[i], kind) for i, kind in kinds):
            return body(*args, **kwargs)
        for index in kept:
            if values[index] is not defaults[index]:
                raise TypeError(
                    "fi-patch's op for %s() leaves %s to its default: pass it only outside "
                    "torch.compile" % (called, names[index])
                )
        for index in enums:
            if values[index] is not None:
                values[index] = int(values[index])
        passed: "List[Any]" = []
        for index, value in enumerate(values):
            if index in split:
                tensor = isinstance(value, torch.Tensor)
                passed += [value, None] if tensor else [None, value]
            elif index in pairs:
                if isinstance(value, tuple):
                    first, second = value
                    passed += [first, second]
                else:
                    passed += [value, None]
            elif index not in kept and index != flag:
                passed.append(value)
        if out_op is not None and passed[at] is not None:
            others = out_op(*passed)
            if several:
                return [passed[at], *(others if isinstance(others, tuple) else (others,))]
            return [passed[at]] if listed else passed[at]
        uncapturable = any(
            (values[i] is None) if v == "none" else bool(values[i]) for i, v in unsafe
        )
        chosen = op
        if uncapturable and unsafe_op is not None:
            chosen = unsafe_op
        elif writes_op is not None and any(values[i] is not None for i in written):
            chosen = writes_op
        result = chosen(*passed)
        if listed:
            return list(result) if several else [result]
        return result[0] if flag >= 0 and not values[flag] else result

    entry.traced = traced
    entry.ready = True
    _fi_patch_in_place(entry.fn, _fi_patch_routing(entry))


# Whether a traced call's value is one the op's schema cannot take: a tensor for a number, or
# anything but a tensor (or None) for a tensor, anything but a dtype (or None) for a dtype. A
# SymInt or SymFloat is a number.
def _fi_patch_mistyped(value: "Any", kind: "Any") -> "bool":
    if kind in (torch.Tensor, torch.dtype):
        return value is not None and not isinstance(value, kind)
    return isinstance(value, torch.Tensor)


# Whether a traced call's value is another than the one the op carries (None: any value given).
def _fi_patch_other(value: "Any", carried: "Any") -> "bool":
    if carried is None:
        return value is not None
    return bool(value != carried)


# What an entry point's name holds once it has an op (a declared one, or a boundary's): at each
# call, whether torch.compile is tracing it (torch.compiler.is_compiling, the check vLLM's and
# SGLang's own ops make), then the op (`entry.traced`); otherwise FlashInfer's function, as
# before. The routing belongs to the function however it is reached: called in a traced frame,
# compiled itself, inside a caller's own functools.wraps wrapper (whose body stays its own) or
# under torch.compiler.disable (an eager call, out of the graph). It takes the function's own
# parameters, so that an eager call pays one frame and one check, not the packing of *args and
# **kwargs; it shares the function's attributes (FlashInfer stores some on its functions:
# mm_fp4.suitable_auto_backends) and shows its name, documentation and signature.
def _fi_patch_routing(entry: "Any") -> "Any":
    import inspect

    fn = entry.fn
    try:
        signature: "Optional[inspect.Signature]" = inspect.signature(fn)
    except (TypeError, ValueError):
        signature = None
    routed = _fi_patch_routed(entry, signature)
    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        if hasattr(fn, name):
            setattr(routed, name, getattr(fn, name))
    routed.__dict__ = fn.__dict__
    if signature is not None and "__signature__" not in fn.__dict__:
        fn.__signature__ = signature
    entry.routed = routed
    return routed


# The routing function itself, with the function's parameters (their defaults the function's own
# objects) where its signature is known, else with *args and **kwargs. A @backend_requirement
# wrapper takes a keyword its signature does not show (skip_check=True): the routing function
# passes such keywords on, so that the eager call takes them as before, and a traced call's
# binding refuses them with a TypeError that names them. What it calls are cells of its
# closure, not globals: Dynamo before torch 2.14 reads a traced function's globals from the
# module its __name__ names (here FlashInfer's), not from the function's own namespace.
def _fi_patch_routed(entry: "Any", signature: "Any") -> "Any":
    defaults: "Dict[str, Any]" = {}
    declared, passed = _fi_patch_forwarded(signature, defaults)
    # @backend_requirement marks its wrapper so (every release with it, 0.6.0 on).
    more = hasattr(entry.fn, "is_compute_capability_supported")
    if signature is not None and more and _fi_patch_takes_more(entry.fn, signature):
        declared, passed = declared + ", **_fi_patch_more", passed + ", **_fi_patch_more"
    source = (
        "def _fi_patch_make(_fi_patch_fn, _fi_patch_entry, _fi_patch_compiling, %s):\n"
        "    def _fi_patch_routed(%s):\n"
        "        if _fi_patch_compiling() and _fi_patch_entry.ready:\n"
        "            return _fi_patch_entry.traced(%s)\n"
        "        return _fi_patch_fn(%s)\n"
        "    return _fi_patch_routed\n" % (", ".join(defaults), declared, passed, passed)
    )
    space: "Dict[str, Any]" = {"__name__": __name__}
    exec(compile(source, "<fi-patch routing of %s>" % entry.name, "exec"), space)
    return space["_fi_patch_make"](entry.fn, entry, torch.compiler.is_compiling, **defaults)


# Whether the function itself (a wrapper, not what its __wrapped__ shows) takes **kwargs that
# `signature` does not.
def _fi_patch_takes_more(fn: "Any", signature: "Any") -> "bool":
    import inspect

    def keywords(shown: "Any") -> "bool":
        return any(p.kind == p.VAR_KEYWORD for p in shown.parameters.values())

    try:
        own = inspect.signature(fn, follow_wrapped=False)
    except (TypeError, ValueError):
        return False
    return keywords(own) and not keywords(signature)


# The parameter list of a routing function and the arguments it passes on, for `signature` (the
# defaults go into `defaults`, by name); *args and **kwargs where the signature is unknown.
def _fi_patch_forwarded(signature: "Any", defaults: "Dict[str, Any]") -> "Tuple[str, str]":
    if signature is None:
        return "*args, **kwargs", "*args, **kwargs"
    declared: "List[str]" = []
    passed: "List[str]" = []
    keyword_only = False
    for index, parameter in enumerate(signature.parameters.values()):
        name, kind = parameter.name, parameter.kind
        text = name
        if parameter.default is not parameter.empty:
            defaults["_fi_patch_default_%d" % index] = parameter.default
            text += "=_fi_patch_default_%d" % index
        if kind == parameter.KEYWORD_ONLY and not keyword_only:
            declared.append("*")
        keyword_only = keyword_only or kind in (parameter.KEYWORD_ONLY, parameter.VAR_POSITIONAL)
        if kind == parameter.VAR_POSITIONAL:
            declared.append("*" + name)
            passed.append("*" + name)
        elif kind == parameter.VAR_KEYWORD:
            declared.append("**" + name)
            passed.append("**" + name)
        elif kind == parameter.KEYWORD_ONLY:
            declared.append(text)
            passed.append("%s=%s" % (name, name))
        else:
            declared.append(text)
            passed.append(name)
        if kind == parameter.POSITIONAL_ONLY and (
            index + 1 == len(signature.parameters)
            or list(signature.parameters.values())[index + 1].kind != parameter.POSITIONAL_ONLY
        ):
            declared.append("/")
    return ", ".join(declared), ", ".join(passed)


# The routing function in the entry point's place in its module (where the name still holds the
# function), before any other module imports it.
def _fi_patch_in_place(fn: "Any", routed: "Any") -> "None":
    import sys

    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    name = getattr(fn, "__name__", "")
    if module is not None and getattr(module, name, None) is fn:
        setattr(module, name, routed)


def _fi_patch_boundary_bind(
    name: "str",
    names: "Tuple[str, ...]",
    defaults: "Tuple[Any, ...]",
    positional: "int",
    args: "Tuple[Any, ...]",
    kwargs: "Dict[str, Any]",
) -> "List[Any]":
    if len(args) > positional:
        raise TypeError(
            "%s() takes %d positional arguments but %d were given" % (name, positional, len(args))
        )
    for key in kwargs:
        if key not in names:
            raise TypeError("%s() got an unexpected keyword argument %r" % (name, key))
        if names.index(key) < len(args):
            raise TypeError("%s() got multiple values for argument %r" % (name, key))
    values = list(args)
    for index in range(len(args), len(names)):
        value = kwargs.get(names[index], defaults[index])
        if value is _FiPatchRequired:
            raise TypeError("%s() missing required argument %r" % (name, names[index]))
        values.append(value)
    return values


# The IntEnum class an annotation names (alone or optional), or None.
def _fi_patch_int_enum(annotation: "Any") -> "Any":
    import enum
    import typing

    for kind in (annotation, *typing.get_args(annotation)):
        if isinstance(kind, type) and issubclass(kind, enum.IntEnum):
            return kind
    return None


# The type an op schema gives a parameter with this annotation and default, or None. A default
# of None makes it optional (FlashInfer writes `out: torch.Tensor = None`); a Literal of strings
# is a str; an IntEnum is an int; a union of several types, and an optional list of tensors, have no
# schema type.
def _fi_patch_op_type(annotation: "Any", default: "Any") -> "Any":
    import typing

    optional = default is None
    kinds = _fi_patch_union_members(annotation)
    if kinds is not None:
        if len(kinds) != 1:
            return None
        annotation, optional = kinds[0], True
    if _fi_patch_int_enum(annotation) is not None:
        annotation = int
    if typing.get_origin(annotation) is typing.Literal:
        literal = {type(value) for value in typing.get_args(annotation)}
        annotation = literal.pop() if len(literal) == 1 else None
    plain = (torch.Tensor, int, float, bool, str, torch.dtype, torch.device)
    if annotation not in plain:
        origin, items = typing.get_origin(annotation), typing.get_args(annotation)
        if origin not in (list, tuple) or not items or items[0] not in (int, torch.Tensor):
            return None
        annotation = typing.List[items[0]]  # type: ignore[valid-type]
        # A schema has no optional list of tensors (single_prefill_with_kv_cache's kv_cache_sf).
        if optional and items[0] is torch.Tensor:
            return None
    return typing.Optional[annotation] if optional else annotation


# --- a wrapper's method: run() of the batch attention wrappers -----------------------------------
#
# plan() is host work (it copies the indptr to the host, calls .item(), builds the JIT module),
# called eagerly before; run() reads what plan() left on the wrapper (plan_info, the module, the
# buffers). A patch places one call of _fi_patch_boundary_method in the class body, right after
# the method: the method becomes a routing function, and the constructor gives each wrapper a
# key. While torch.compile traces run(), one call of fi_patch::NAME (NAME_out where the call
# passes out or lse: it declares them written and returns nothing; an output the call asks for
# and does not give is allocated in the graph first, as the fake gives it), which carries the
# wrapper's key, never the wrapper: the op's body finds the wrapper by its key and calls its own
# run() eagerly, so that plan()'s state is read as it is today. A key is counted from 1 in each
# process and never reused (an id() is, once its wrapper is gone). Dynamo reads it as a constant
# of the wrapper and guards on it: another wrapper gives another graph (or the same graph with
# its own key, where Dynamo makes the key dynamic), never the first one's plan. What else the
# fake reads of the wrapper (`_fi_patch_planned`: the KV layout, plan()'s output dtype) is read
# the same way, guarded, and passed as the op's first arguments after the key. The flag
# (`returns_when`: return_lse) is passed on as the caller gives it, since it picks the kernel
# (0.7.4's XQA decode runs only without it): the op returns a list, out alone or (out, lse). A
# call the op does not take is traced as the method's own body, as unpatched: a wrapper without
# a key of its own (made before fi-patch's routing existed, or a copy, which carries its
# original's), a call with *args (arguments for a custom kernel), another value of a parameter
# the op carries one value of, a value its schema cannot take, or one the fake does not follow
# (`_fi_patch_unpatched`: its method returns another tensor than the out given, or its wrapper
# was planned for a backend that allocates its own way). The ops are tagged
# nondeterministic_seeded: no two calls are merged as one.
_fi_patch_wrappers: "Any" = weakref.WeakValueDictionary()
_fi_patch_wrapper_keys = itertools.count(1)


def _fi_patch_boundary_method(
    fn: "Any",
    init: "Any",
    name: "str",
    fake: "str",
    rule: "str" = "",
    out: "str" = "",
    returns: "int" = 1,
    check: "str" = "",
    types: "Optional[Dict[str, str]]" = None,
    returns_when: "str" = "",
    only: "Optional[Dict[str, Any]]" = None,
    writes: "Tuple[str, ...]" = (),
    aliases: "Tuple[Tuple[str, int], ...]" = (),
) -> "Tuple[Any, Any]":
    entry = _fi_patch_method_entry(
        fn, name, fake, rule, out, returns, check, types, returns_when, only, writes, 1, {}
    )
    if entry.routed is None:
        return fn, init
    # The class's other methods that set the wrapper's state and call this one (`aliases`: the
    # deprecated forward(), which SGLang calls, and forward_return_lse(), defined after run()):
    # each gets an op of its own, whose body is that method, so that what it sets on the wrapper
    # is set when the op runs. Traced, its stores would be applied after the graph ran, and the
    # op would read the state they replace. They are routed when the class's first wrapper is
    # made, once the class holds them all.
    base = name[: len(name) - len(getattr(fn, "__name__", ""))]

    def alias(owner: "Any") -> "None":
        for other, outputs in aliases:
            method = vars(owner).get(other)
            if method is None:
                continue
            # Its cache is a pair wherever run()'s is (forward_return_lse annotates a tensor).
            pairs = dict(entry.pairs)
            made = _fi_patch_method_entry(
                method,
                base + other,
                fake,
                rule,
                "",
                returns,
                check,
                types,
                "",
                only,
                (),
                outputs,
                pairs,
            )
            entry.aliases.append(made)
            made.refuses = True
            if made.routed is None:
                # One fi-patch cannot make an op of refuses to be traced, with a TypeError.
                made.traced, made.ready = _fi_patch_refusing(made, made.reason), True
                _fi_patch_routing(made)
            setattr(owner, other, made.routed)

    return entry.routed, _fi_patch_keyed(init, entry, alias)


# One method's boundary: its entry, its ops and its routing function, or its reason for none.
# `outputs`: how many it returns where its flag does not say (forward_return_lse two); `pairs`:
# the parameters it takes as a tensor or a pair, whatever their annotation.
def _fi_patch_method_entry(
    fn: "Any",
    name: "str",
    fake: "str",
    rule: "str",
    out: "str",
    returns: "int",
    check: "str",
    types: "Optional[Dict[str, str]]",
    flag: "str",
    only: "Optional[Dict[str, Any]]",
    writes: "Tuple[str, ...]",
    outputs: "int",
    pairs: "Dict[str, str]",
    keyed: "bool" = True,
) -> "_FiPatchBoundary":
    entry = _FiPatchBoundary(name, fn)
    entry.method = keyed
    entry.pairs = dict(pairs)
    entry.writes = tuple(writes)
    entry.returns = returns
    entry.only = dict(only or {})
    entry.outputs = outputs

    def make(checking: "Any") -> "None":
        _fi_patch_make_method(entry, fake, rule, checking, out, types or {}, flag)

    _fi_patch_entry_made(entry, check, fake, rule, make)
    return entry


# The constructor, giving the wrapper its key first; the first wrapper of the class (made outside
# a trace) routes the methods that call this one (`alias`).
def _fi_patch_keyed(init: "Any", entry: "_FiPatchBoundary", alias: "Any") -> "Any":
    import functools

    @functools.wraps(init)
    def _fi_patch_keyed_init(self: "Any", *args: "Any", **kwargs: "Any") -> "Any":
        self._fi_patch_key = next(_fi_patch_wrapper_keys)
        # Whose key it is: a copy (copy.copy, pickle) carries the key of the wrapper it copies.
        self._fi_patch_owner = id(self)
        _fi_patch_wrappers[self._fi_patch_key] = self
        if not entry.aliased and not torch.compiler.is_compiling():
            entry.aliased = True
            name = getattr(entry.fn, "__name__", "")
            owners = [c for c in type(self).__mro__ if vars(c).get(name) is entry.routed]
            if owners:
                alias(owners[0])
        return init(self, *args, **kwargs)

    return _fi_patch_keyed_init


# What a traced call of `entry`'s method does where fi-patch's op cannot take it: raise a TypeError
# that says why, and what to call instead.
def _fi_patch_refusing(entry: "_FiPatchBoundary", why: "str") -> "Any":
    called = getattr(entry.fn, "__qualname__", entry.name)

    def refused(*args: "Any", **kwargs: "Any") -> "Any":
        raise TypeError(
            "fi-patch's op for %s() does not take this call (%s): traced, the state it sets on "
            "the wrapper would be set after the graph ran. Call it outside torch.compile, or call "
            "run() with the wrapper planned for it" % (called, why)
        )

    return refused


def _fi_patch_keyed_wrapper(key: "int", called: "str") -> "Any":
    wrapper = _fi_patch_wrappers.get(key)
    if wrapper is None:
        raise RuntimeError(
            "fi-patch: the wrapper whose %s() this compiled graph calls (key %d) is gone"
            % (called, key)
        )
    return wrapper


# fi_patch::NAME and NAME_out for a method, and its routing function. The op's parameters are the
# key (`wrapper`), what the fake reads of the wrapper (`planned`), then the method's own, typed as
# an entry point's are. A function whose outputs are given or allocated as a method's are
# (`_fi_patch_boundary(..., given=True)`: trtllm_batch_decode_with_kv_cache) has the same ops and
# routing without the key: its own parameters alone.
def _fi_patch_make_method(
    entry: "_FiPatchBoundary",
    fake_name: "str",
    rule: "str",
    check: "Any",
    out: "str",
    types: "Dict[str, str]",
    flag: "str",
) -> "None":
    import inspect
    import typing

    fake = _fi_patch_boundary_fakes[fake_name]
    keyed = entry.method
    planned = _fi_patch_planned.get(fake_name, ()) if keyed else ()

    typed = _fi_patch_parameters(entry, types, out)
    if typed is None:
        return
    # A function's flag where its text has it (return_lse from 0.6.12): without it, the text
    # returns its first output alone.
    if not keyed and flag not in entry.names:
        flag = ""
    if flag and (flag not in entry.names or entry.returns < 2):
        entry.reason = "it has no flag %s that returns %d outputs" % (flag, entry.returns)
        return
    entry.only = {k: v for k, v in entry.only.items() if k in entry.names}
    entry.pairs = {k: v for k, v in entry.pairs.items() if k in entry.names}
    # The outputs it takes (a function's lse from 0.6.12), where the text has them.
    entry.writes = tuple(w for w in entry.writes if w in entry.names)
    given = tuple(w for w in (out, *entry.writes) if w and w in entry.names)
    keyword = inspect.Parameter.POSITIONAL_OR_KEYWORD
    head = [inspect.Parameter("wrapper", keyword, annotation=int)] if keyed else []
    head += [inspect.Parameter(n, keyword, annotation=kind) for n, _, kind in planned]
    typed = head + typed
    passed = [p.name for p in typed]
    ours = [p.name for p in head]
    fn, called = entry.fn, getattr(entry.fn, "__qualname__", entry.name)
    result = typing.List[torch.Tensor]

    def outputs(named: "Dict[str, Any]") -> "List[Any]":
        if keyed:
            wrapper = _fi_patch_keyed_wrapper(named["wrapper"], called)
            for own in ours:
                named.pop(own)
            returned = fn(wrapper, **named)
        else:
            returned = fn(**named)
        return list(returned) if isinstance(returned, (tuple, list)) else [returned]

    def run(*values: "Any") -> "Any":
        return outputs(_fi_patch_arguments(entry, passed, values))

    def run_out(*values: "Any") -> "None":
        outputs(_fi_patch_arguments(entry, passed, values))

    def faked(*values: "Any") -> "Any":
        named = _fi_patch_joined(entry, passed, values)
        return list(fake(named, rule, check))[: 2 if flag and named[flag] else entry.outputs]

    def faked_out(*values: "Any") -> "None":
        faked(*values)  # its checks of the outputs given

    run.__signature__ = inspect.Signature(typed, return_annotation=result)  # type: ignore[attr-defined]
    run_out.__signature__ = inspect.Signature(typed, return_annotation=None)  # type: ignore[attr-defined]
    made: "List[Tuple[str, Any, Any, Tuple[str, ...]]]" = [("", run, faked, ())]
    if given:
        made.append(("_out", run_out, faked_out, given))
    # What a call that gives some of its outputs but not all allocates for the others (the
    # fake's tensors, zeroed: cute-dsl wants a zeroed out), before it calls the out op.
    entry.allocated = faked
    entry.op_names = tuple(passed)
    for suffix, body, its_fake, mutates in made:
        # A method's ops are nondeterministic_seeded: no two calls are merged as one. They read
        # the wrapper's state, which a forward() op between them may change, and nothing else
        # says so.
        tags = _fi_patch_tags()
        if keyed:
            tags = (*tags, torch.Tag.nondeterministic_seeded)
        op = torch.library.custom_op(
            "fi_patch::" + entry.name + suffix, body, mutates_args=mutates, tags=tags
        )
        op.register_fake(its_fake)
        if not mutates:
            op.register_autograd(_fi_patch_boundary_no_grad, setup_context=_fi_patch_no_grad_setup)
    _fi_patch_method_route(entry, given, flag, planned, fake_name)


# While torch.compile traces the method: the wrapper's key and what the fake reads of it, the
# arguments bound as Python binds them, then one op; its outputs as the method returns them, a
# tensor the caller gave in its place.
def _fi_patch_method_route(
    entry: "_FiPatchBoundary",
    given: "Tuple[str, ...]",
    flag: "str",
    planned: "Tuple[Tuple[str, str, Any], ...]",
    fake: "str",
) -> "None":
    names, defaults, positional = entry.names, entry.defaults, entry.positional
    kept = [names.index(k) for k in entry.kept]
    enums = [names.index(e) for e in entry.enums]
    split = [names.index(s) for s in entry.split]
    pairs = [names.index(p) for p in entry.pairs]
    only = [(names.index(k), v) for k, v in entry.only.items()]
    kinds = [(names.index(k), v) for k, v in entry.kinds.items()]
    written = [names.index(g) for g in given]
    at = names.index(flag) if flag else -1
    attributes = [attribute for _, attribute, _ in planned]
    called = getattr(entry.fn, "__qualname__", entry.name)
    fn = entry.fn

    keyed = entry.method

    # A call the op does not take: the method's own body is traced, as unpatched; for a method
    # that sets the wrapper's state and calls another (forward()), a TypeError that says why,
    # since its stores would land after the graph, and the run() it calls would read the state
    # they replace. A function (not `keyed`) has no self.
    def own(self: "Any", args: "Any", kwargs: "Any") -> "Any":
        return fn(self, *args, **kwargs) if keyed else fn(*args, **kwargs)

    def body(self: "Any", *args: "Any", **kwargs: "Any") -> "Any":
        if entry.refuses:
            _fi_patch_refusing(entry, "a call its op does not take")()
        return own(self, args, kwargs)

    op = getattr(torch.ops.fi_patch, entry.name)
    out_op = getattr(torch.ops.fi_patch, entry.name + "_out", None)
    unpatched = _fi_patch_unpatched.get(fake, _fi_patch_never)
    read = [name for name, _, _ in planned]

    def route(self: "Any", args: "Any", kwargs: "Any") -> "Any":
        key = getattr(self, "_fi_patch_key", None)
        # No key of its own: made before fi-patch's routing existed, or a copy (copy.copy,
        # pickle), which carries the key of the wrapper it copies.
        if keyed and (key is None or getattr(self, "_fi_patch_owner", None) != id(self)):
            return body(self, *args, **kwargs)
        if len(args) > positional:
            return body(self, *args, **kwargs)
        values = _fi_patch_boundary_bind(called, names, defaults, positional, args, kwargs)
        if any(_fi_patch_other(values[i], value) for i, value in only):
            return body(self, *args, **kwargs)
        if any(_fi_patch_mistyped(values[i], kind) for i, kind in kinds):
            return body(self, *args, **kwargs)
        # Neither a tensor nor a pair (a list): FlashInfer's own error, from the method.
        if any(not isinstance(values[i], (torch.Tensor, tuple, type(None))) for i in pairs):
            return body(self, *args, **kwargs)
        state = [getattr(self, a, None) for a in attributes]
        # A call the fake does not follow: the method itself is traced, forward() too (its
        # stores and the run() it calls are traced together then, as unpatched); a function's
        # own body.
        if unpatched({**dict(zip(names, values)), **dict(zip(read, state))}):
            return own(self, args, kwargs)
        for index in kept:
            if values[index] is not defaults[index]:
                raise TypeError(
                    "fi-patch's op for %s() leaves %s to its default: pass it only outside "
                    "torch.compile" % (called, names[index])
                )
        passed: "List[Any]" = [key, *state] if keyed else []
        for index, value in enumerate(values):
            if index in enums and value is not None:
                passed.append(int(value))
            elif index in split:
                tensor = isinstance(value, torch.Tensor)
                passed += [value, None] if tensor else [None, value]
            elif index in pairs:
                if isinstance(value, tuple):
                    first, second = value
                    passed += [first, second]
                else:
                    passed += [value, None]
            elif index not in kept:
                passed.append(value)
        both = (at >= 0 and bool(values[at])) or entry.outputs > 1
        if out_op is None or all(values[i] is None for i in written):
            results = list(op(*passed))
            return tuple(results) if both else results[0]
        asked = written[: 2 if both else 1]
        if any(values[i] is None for i in asked):
            made = entry.allocated(*passed)
            for place, index in enumerate(asked):
                if values[index] is None:
                    values[index] = made[place].zero_()
                    passed[entry.op_names.index(names[index])] = values[index]
        out_op(*passed)
        results = [values[i] for i in asked]
        return tuple(results) if both else results[0]

    def traced(self: "Any", *args: "Any", **kwargs: "Any") -> "Any":
        return route(self, args, kwargs)

    def traced_function(*args: "Any", **kwargs: "Any") -> "Any":
        return route(None, args, kwargs)

    entry.traced = traced if keyed else traced_function
    entry.ready = True
    _fi_patch_routing(entry)


# --- the fakes, by the name a patch gives -------------------------------------------------------


# silu_and_mul, gelu_and_mul, gelu_tanh_and_mul: out is input's shape with the last dimension
# halved, input's dtype, contiguous (flashinfer/activation.py allocates it with torch.empty).
# The rule is how the release checks input: "16-bytes" (up to 0.7.2.post1: the last dimension a
# multiple of 16 bytes) or "even" (0.7.4: an even last dimension).
def _fi_patch_fake_act_and_mul(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    input, out = values["input"], values["out"]
    if rule == "16-bytes" and input.shape[-1] * input.dtype.itemsize % 16 != 0:
        raise ValueError("The pointers must be multiple of 16 bytes.")
    if rule == "even" and input.shape[-1] % 2 != 0:
        raise ValueError("The last dimension must be even (2 * hidden_size).")
    if out is None:
        return input.new_empty((*input.shape[:-1], input.shape[-1] // 2))
    assert input.ndim == out.ndim, "%s != %s" % (input.ndim, out.ndim)
    assert input.shape[:-1] == out.shape[:-1], "%s != %s" % (input.shape[:-1], out.shape[:-1])
    assert input.shape[-1] == 2 * out.shape[-1], "%s != %s" % (
        input.shape[-1],
        2 * out.shape[-1],
    )
    return None


# FlashInfer's check, as @backend_requirement runs it: a false answer refuses the problem too.
def _fi_patch_checked_problem(check: "Any", values: "Dict[str, Any]") -> "None":
    if not check(**values):
        raise ValueError("Problem size is not supported")


# mm_fp4: FlashInfer's check (_check_mm_fp4_problem_size: 2-D operands, a.shape[1] ==
# b.shape[0], the dtypes, alpha, out_dtype, the block size; ValueError), then out as mm_fp4
# allocates it: (a.shape[0], b.shape[1]), out_dtype, on a's device, contiguous. With out= given
# the op writes into it and returns nothing. The backend's own checks need the device: the op
# runs them, eagerly.
def _fi_patch_fake_mm_fp4(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    _fi_patch_checked_problem(check, values)
    if values["out"] is not None:
        return None
    a, b = values["a"], values["b"]
    return a.new_empty((a.shape[0], b.shape[1]), dtype=values["out_dtype"])


# bmm_fp8: FlashInfer's check (_check_bmm_fp8_problem_size: dtype bf16 or fp16; ValueError),
# then out as bmm_fp8 allocates it: (A.shape[0], A.shape[1], B.shape[2]), dtype, on A's device,
# contiguous.
def _fi_patch_fake_bmm_fp8(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    _fi_patch_checked_problem(check, values)
    if values["out"] is not None:
        return None
    a, b = values["A"], values["B"]
    return a.new_empty((a.shape[0], a.shape[1], b.shape[2]), dtype=values["dtype"])


# mm_fp8: out as mm_fp8 allocates it, (a.shape[0], n), bf16 only, contiguous, with n the weight's
# second dimension for the trtllm_low_latency backend (a prepared (k // 128, n, 128) weight; auto
# picks it for a 3-D weight) and its first for the others (a plain (n, k) weight). The rule says
# how the release refuses a backend: "trtllm-only" (up to 0.6.18.post1: ValueError for any other)
# or "backends" (0.7: @backend_requirement refuses it first, with BackendSupportedError). Then
# mm_fp8's own checks, ValueError: out_dtype bf16; a given out bf16, of that shape, on a's device.
def _fi_patch_fake_mm_fp8(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    a, b, out, backend = values["a"], values["b"], values["out"], values["backend"]
    trtllm = backend == "trtllm_low_latency" or (backend == "auto" and b.ndim == 3)
    if rule == "trtllm-only" and backend != "trtllm_low_latency":
        raise ValueError("Unsupported backend: %s." % backend)
    n = b.shape[1] if trtllm else b.shape[0]
    if out is None:
        if values["out_dtype"] != torch.bfloat16:
            raise ValueError("Unsupported output dtype: %s." % values["out_dtype"])
        return a.new_empty((a.shape[0], n), dtype=values["out_dtype"])
    if out.dtype != torch.bfloat16 or out.dtype != values["out_dtype"]:
        raise ValueError("Unsupported output dtype: %s." % out.dtype)
    if tuple(out.shape) != (a.shape[0], n):
        raise ValueError("Output shape mismatch. Expected %s." % ((a.shape[0], n),))
    if out.device != a.device:
        raise ValueError("Output device mismatch. Expected %s." % a.device)
    return None


def _fi_patch_round_up(value: "Any", to: "int") -> "Any":
    return (value + to - 1) // to * to


# fp4_quantize, where FlashInfer has no op of its own for it (0.2.6 to 0.6.11.post3), cuda backend:
# x_q uint8 (*input.shape[:-1], k // 2) and the scales, uint8, flat, of the layout's size: rows
# padded to 128 (128x4) or 8 (8x4) and k // sf_vec_size scale columns to 4 where swizzled, rows *
# k // sf_vec_size where linear (the kernel's allocation: csrc/nv_internal/tensorrt_llm/thop/
# fp4Quantize.cpp up to 0.3.1.post1, the module getter's fp4_quantize_sm100 in Python from
# 0.4.0), reshaped by fp4_quantize to rows of k // sf_vec_size, a column-major input transposed
# before and both outputs transposed back after. The rule is the release's fp4_quantize: "five"
# (0.2.6 to 0.2.8: sf_vec_size 16 only, no 8x4 layout, no column-major path), "unpadded" (0.2.9 to
# 0.6.7.post3) or "padded" (0.6.8 on: swizzled scales reshaped to their padded column count).
def _fi_patch_fake_fp4_quantize(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    input, sf_vec_size = values["input"], values["sf_vec_size"]
    swizzled = values["is_sf_swizzled_layout"]
    if rule == "five" and sf_vec_size != 16:
        raise NotImplementedError("sf_vec_size can only be 16")
    if sf_vec_size != 16 and sf_vec_size != 32:
        raise NotImplementedError("sf_vec_size can only be 16 or 32")
    column_major = rule != "five" and input.stride(-2) == 1
    if column_major:
        input = input.transpose(-2, -1)
    assert input.shape[-1] % sf_vec_size == 0
    k = input.shape[-1]
    m = input.numel() // k
    columns = k // sf_vec_size
    x_q = input.new_empty((*input.shape[:-1], k // 2), dtype=torch.uint8)
    if swizzled:
        rows = 8 if values.get("is_sf_8x4_layout") else 128
        size = _fi_patch_round_up(m, rows) * _fi_patch_round_up(columns, 4)
    else:
        size = m * columns
    if rule == "padded" and swizzled:
        columns = _fi_patch_round_up(columns, 4)
    sf = input.new_empty((size,), dtype=torch.uint8).reshape((-1, columns))
    if column_major:
        return x_q.transpose(-2, -1), sf.transpose(-2, -1)
    return x_q, sf


# mxfp8_quantize: (x_q, sf) as the kernel module's mxfp8_quantize_sm100 allocates them
# (flashinfer/quantization/fp8_quantization.py, the same in every release with a rule here):
# - on a CUDA device, x_q float8_e4m3fn (*input.shape[:-1], padded_k), padded_k the last
#   dimension rounded up to `alignment`; sf flat uint8 of the layout's size: 128x4 (0) rows to
#   128 and padded_k // 32 scale columns to 4, 8x4 (1) rows to 8, linear (2) rows * padded_k // 32;
# - on the CPU (the host kernel), x_q uint8 of input's shape, sf of the 2-D sizes; no 8x4;
# - the cute-dsl backend (flashinfer/quantization/kernels/mxfp8_quantize.py) flattens: x_q
#   (rows, padded_k), sf as on CUDA.
# The rule is how the release reads its layout and backend: "cute-128x4" (0.6.7 to 0.6.11: the
# cute-dsl backend refuses 8x4 and follows is_sf_swizzled_layout), "cute-layouts" (0.6.12 to
# 0.7.2.post1: it follows sf_swizzle_layout) or "auto" (0.7.4: backend "auto" is "cuda", and
# batch_invariant=True, which needs "auto", gives the CUDA shapes). The availability of
# CuTe-DSL, the batch-invariant kernel's own refusals and the kernel's dtype check run in the op.
def _fi_patch_fake_mxfp8_quantize(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    input, alignment, backend = values["input"], values["alignment"], values["backend"]
    layout = values["sf_swizzle_layout"]
    if layout is None:
        layout = 0 if values["is_sf_swizzled_layout"] else 2
    if rule == "auto" and values["batch_invariant"]:
        if backend != "auto":
            raise ValueError("mxfp8_quantize: batch_invariant=True requires backend='auto'")
        backend = "cuda"
    assert input.shape[-1] % 32 == 0
    backends = ("auto", "cuda", "cute-dsl") if rule == "auto" else ("cuda", "cute-dsl")
    assert backend in backends, "backend must be one of %s, got %r" % (backends, backend)
    k = input.shape[-1]
    rows = input.numel() // k
    padded = _fi_patch_round_up(k, alignment)
    uint8, fp8 = torch.uint8, torch.float8_e4m3fn
    if backend == "cute-dsl":
        if rule == "cute-128x4" and layout == 1:
            raise ValueError("SfLayout.layout_8x4 is not supported in cute-dsl backend")
        if rule == "cute-128x4":
            layout = 0 if values["is_sf_swizzled_layout"] else 2
        x_q = input.new_empty((rows, padded), dtype=uint8).view(fp8)
        return x_q, input.new_empty((_fi_patch_mx_scales(rows, padded, layout),), dtype=uint8)
    if input.device.type == "cpu":
        if layout not in (0, 2):
            raise ValueError("%s is not supported for mxfp8 quantization on CPU." % layout)
        size = _fi_patch_mx_scales(input.shape[0], input.shape[1], layout)
        return input.new_empty(input.shape, dtype=uint8), input.new_empty((size,), dtype=uint8)
    if layout not in (0, 1, 2):
        raise ValueError("Invalid sf_swizzle_layout value: %s" % layout)
    x_q = input.new_empty((*input.shape[:-1], padded), dtype=fp8)
    return x_q, input.new_empty((_fi_patch_mx_scales(rows, padded, layout),), dtype=uint8)


# The MXFP8 scales' size: one byte per 32 columns, rows and scale columns padded for the
# swizzled layouts (0: 128x4, 1: 8x4; 2 is linear).
def _fi_patch_mx_scales(rows: "Any", columns: "Any", layout: "int") -> "Any":
    if layout == 2:
        return rows * columns // 32
    padded_rows = _fi_patch_round_up(rows, 8 if layout == 1 else 128)
    return padded_rows * _fi_patch_round_up(columns // 32, 4)


# nvfp4_batched_quantize: (x_q, sf) as fp4_batched_quantize_sm100 allocates them
# (flashinfer/quantization/fp4_quantization.py): a (b, m, k) input (ValueError from unpacking
# any other), x_q uint8 (b, m, k // 2), sf uint8 (b, m rounded up to 128 * (k // sf_vec_size)
# rounded up to 4), both contiguous. The kernel's checks (sf_vec_size 16, the dtypes) run in
# the op.
def _fi_patch_fake_nvfp4_batched(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    a = values["a"]
    b, m, k = a.shape
    scales = _fi_patch_round_up(m, 128) * _fi_patch_round_up(k // values["sf_vec_size"], 4)
    return a.new_empty((b, m, k // 2), dtype=torch.uint8), a.new_empty(
        (b, scales), dtype=torch.uint8
    )


# scaled_fp4_grouped_quantize: (x_q, sf) as scaled_fp4_grouped_quant_sm100 allocates and
# permutes them, for an (l, m, k) input with k a multiple of 16 (AssertionError): see
# _fi_patch_nvfp4_experts.
def _fi_patch_fake_nvfp4_grouped(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    a = values["a"]
    groups, m, k = a.shape
    return _fi_patch_nvfp4_experts(a, groups, m, k)


# silu_and_mul_scaled_nvfp4_experts_quantize: the same, for an (l, m, 2 * k) input, gate then
# up, quantized to k columns (flashinfer/quantization/fp4_quantization.py,
# silu_and_mul_scaled_nvfp4_experts_quantize_sm100).
def _fi_patch_fake_nvfp4_silu_experts(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    a = values["a"]
    groups, m, both = a.shape
    return _fi_patch_nvfp4_experts(a, groups, m, both // 2)


# Per expert l: x_q uint8 allocated (l, m, k // 2) and returned permuted to (m, k // 2, l); sf
# allocated as (l, m rounded up to 128, (k // 16) rounded up to 4) bytes, viewed as
# float8_e4m3fn (l, rm, rk, 32, 4, 4) and returned permuted to (32, 4, rm, 4, rk, l). Neither
# is contiguous, as the eager call's are not.
def _fi_patch_nvfp4_experts(a: "Any", groups: "Any", m: "Any", k: "Any") -> "Any":
    assert k % 16 == 0
    padded_k = _fi_patch_round_up(k // 16, 4)
    padded_m = _fi_patch_round_up(m, 128)
    x_q = a.new_empty((groups, m, k // 2), dtype=torch.uint8).permute(1, 2, 0)
    shape = (groups, padded_m // 128, padded_k // 4, 32, 4, 4)
    scales = a.new_empty(shape, dtype=torch.float8_e4m3fn).permute(3, 4, 1, 5, 2, 0)
    return x_q, scales


# block_scale_interleave (and nvfp4_block_scale_interleave, the same function): the scales'
# dtype uint8 or bfloat16 (AssertionError), then, as block_scale_interleave_sm100 allocates it,
# a flat contiguous tensor of that dtype: experts (the first dimension of a 3-D input, else 1)
# * the last two dimensions rounded up to 128 and 4 (IndexError for a 1-D input). With out=
# (0.7.2.post1 on), out must be exactly that (ValueError), and the op writes into it.
def _fi_patch_fake_block_scale_interleave(
    values: "Dict[str, Any]", rule: "str", check: "Any"
) -> "Any":
    scales, out = values["unswizzled_sf"], values.get("out")
    assert scales.dtype in (torch.uint8, torch.bfloat16), (
        "Input dtype must be uint8 or bfloat16, got %s" % scales.dtype
    )
    experts = scales.shape[0] if scales.ndim == 3 else 1
    rows, columns = scales.shape[-2], scales.shape[-1]
    size = experts * _fi_patch_round_up(rows, 128) * _fi_patch_round_up(columns, 4)
    if out is None:
        return scales.new_empty((size,))
    if (
        out.device != scales.device
        or out.dtype != scales.dtype
        or tuple(out.shape) != (size,)
        or not out.is_contiguous()
    ):
        raise ValueError(
            "block_scale_interleave out must be a contiguous flat tensor of shape (%s,)" % size
        )
    return None


# top_p_sampling_from_probs, top_k_sampling_from_probs, top_k_top_p_sampling_from_probs and
# min_p_sampling_from_probs: as the sampling module's functions allocate them
# (flashinfer/sampling.py, get_sampling_module), one sample per row (of indices where given, else
# of probs), indices' dtype or int32, and one bool per row, whether that row's sample is valid;
# both contiguous, on probs' device. The ValueErrors first: an unknown filter_apply_order; and
# where seed and offset are both given, _validate_and_convert_seed_offset's (both tensors or both
# numbers; a tensor on probs' device, int64 or uint64, 1-D, of one value or one per row). The
# same in every release with the rule "allocated" (0.6.7 on). The top-k-first fast path (0.6.14
# on, a vocabulary of 65536 or more) gives the same outputs.
def _fi_patch_fake_sampling(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    probs, indices = values["probs"], values["indices"]
    order = values.get("filter_apply_order", "top_k_first")
    if order not in ("top_k_first", "joint"):
        raise ValueError("Invalid filter_apply_order: %s" % order)
    rows = indices.shape[0] if indices is not None else probs.shape[0]
    seed, offset = values["seed"], values["offset"]
    if seed is not None and offset is not None:
        if isinstance(seed, torch.Tensor) != isinstance(offset, torch.Tensor):
            raise ValueError("seed and offset must both be tensors or both be scalars")
        for what, given in (("seed", seed), ("offset", offset)):
            if isinstance(given, torch.Tensor):
                _fi_patch_sampling_seed(what, given, probs.device, rows)
    dtype = indices.dtype if indices is not None else torch.int32
    return probs.new_empty((rows,), dtype=dtype), probs.new_empty((rows,), dtype=torch.bool)


def _fi_patch_sampling_seed(what: "str", given: "Any", device: "Any", rows: "Any") -> "None":
    if given.device != device:
        raise ValueError("%s tensor must be on %s" % (what, device))
    if given.dtype not in (torch.int64, torch.uint64):
        raise ValueError("%s tensor must be int64/uint64" % what)
    if given.ndim != 1:
        raise ValueError("%s tensor must be 1D" % what)
    if given.shape[0] != 1 and given.shape[0] != rows:
        raise ValueError("%s tensor length must be 1 or %s" % (what, rows))


# top_p_renorm_probs, top_k_renorm_probs and top_k_mask_logits: the renormalised probabilities
# (or the masked logits) as the sampling module's functions allocate them (flashinfer/sampling.py,
# get_sampling_module): torch.empty_like of the input after its conversion, so of its shape, and
# of its strides where it is dense. The rule is that conversion: "float32" (the input converted
# with .float() first: top_p_renorm_probs 0.6.0 to 0.6.6, FlashInfer's own fake giving the
# input's dtype), "workspace" (the same, from 0.6.7, after the workspace's size is taken from
# probs.size(1): IndexError for a 1-D input) or "input-dtype" (top_k_renorm_probs and
# top_k_mask_logits from 0.6.0: the input as it is, and AssertionError for a dtype other than
# float32, float16 or bfloat16). The kernel's own checks run in the op.
def _fi_patch_fake_renorm(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    given = values["probs"] if "probs" in values else values["logits"]
    if rule == "workspace":
        given.size(1)
    if rule in ("float32", "workspace"):
        return torch.empty_like(given, dtype=torch.float32)
    assert given.dtype in (torch.float32, torch.float16, torch.bfloat16), (
        "Unsupported dtype %s, expected float32, float16, or bfloat16" % given.dtype
    )
    return torch.empty_like(given)


# concat_mla_k (flashinfer/concat_ops.py): writes k, returns nothing. The rule is the backends the
# release has: "default" (0.6.0 to 0.6.18.post1: the kernel alone) or "backends" (0.7.0 on:
# ValueError for a backend other than "default" and "cake"). The kernel's checks of the shapes and
# dtypes, and the cake backend's own, run in the op.
def _fi_patch_fake_concat_mla_k(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    backend = values.get("backend", "default")
    if rule == "backends" and backend not in ("default", "cake"):
        raise ValueError("unsupported concat_mla_k backend: %r" % (backend,))
    return None


# fused_topk_deepseek (flashinfer/fused_moe/fused_routing_dsv3.py): writes topk_values,
# topk_indices and (0.6.8 on) routing_replay_out, returns nothing. FlashInfer's own check
# (_check_dsv3_fused_routing_supported, @backend_requirement's common check: the groups, topk and
# the experts per group within the kernel's limits; from 0.6.8 routing_replay_out int16 of topk
# columns and enough rows; from 0.7.2 every tensor contiguous: ValueError) runs on the fake
# tensors, the same rule "checked" in every release. The device's capability and the backend's
# own check (0.7: cake) run in the op.
def _fi_patch_fake_fused_topk_deepseek(
    values: "Dict[str, Any]", rule: "str", check: "Any"
) -> "Any":
    _fi_patch_checked_problem(check, values)
    return None


# The trtllm fused MoE (flashinfer/fused_moe/core.py: trtllm_bf16_moe, trtllm_fp4_block_scale_moe,
# trtllm_fp8_block_scale_moe, trtllm_fp8_per_channel_scale_moe, trtllm_fp8_per_tensor_scale_moe,
# trtllm_mxint4_block_scale_moe, and the _routed_ variant of each, which takes the routing as
# topk_ids instead of the logits and allocates the same output), finalized (do_finalize true, the
# one value the op carries: unfinalized, the first output's rows follow the routing on the
# device). FlashInfer's own check of routing_replay_out (_validate_routing_replay_out: int16,
# 2-D, top_k columns, contiguous; in 0.6.17 - 0.6.18.post1 none with fused shared experts; from
# 0.7.0 at least a row per token: ValueError) runs first, as the entry point runs it, where the
# patch names it (a routed MoE that takes no routing_replay_out names none). Then the
# output as the kernel module's op allocates it: bfloat16 (num_tokens, width), width the hidden
# size (an FP4 input, uint8, packs two values a byte) or valid_hidden_size where given (0.7.0 on:
# positive, and no wider than the hidden size once rounded up to 128, ValueError). A given output
# is written, and checked as the op checks it. The rule is that check: "exact" (of that shape,
# bfloat16, on the input's device, ValueError: BF16 and FP8 per tensor, which take output from
# 0.6.14, FP8 block scales up to 0.6.18.post1) or "narrow" (bfloat16 and the device, ValueError;
# the token count and a width within the hidden size, AssertionError; valid_hidden_size's width
# where given, ValueError: FP4, FP8 block scales and MXINT4 from 0.7.0) or "unchecked" (taken as it
# is: MXINT4 up to 0.6.18.post1, FP4 from 0.2.11.post3 and its routed variant from 0.2.10, to
# 0.5.3). FP8 with per-channel scales takes no output, and its rule is the activations it takes:
# "per-channel" (bfloat16, float16 or FP8, in the kernel module's op: 0.7.0) or "per-channel-fp8"
# (FP8 only, in the function: 0.7.1 on), ValueError. The routing, the autotuner and the kernel's
# own checks run in the op.
def _fi_patch_fake_trtllm_moe(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    import inspect

    hidden, output, top_k = values["hidden_states"], values.get("output"), values["top_k"]
    tokens = hidden.shape[0]
    accepted = _fi_patch_moe_activations.get(rule)
    if accepted is not None and hidden.dtype not in accepted:
        names = [str(d) for d in accepted]
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + ", or " + names[-1]
        raise ValueError(
            "FP8 per-channel MoE hidden_states must have dtype %s, got %s." % (listed, hidden.dtype)
        )
    # The check's parameters are the release's: num_tokens from 0.7.0, the fused shared experts
    # in 0.6.17 - 0.6.18.post1. A routed MoE without routing_replay_out names no check.
    if check is not None:
        taken = inspect.signature(check).parameters
        more: "Dict[str, Any]" = {}
        if "num_tokens" in taken:
            more["num_tokens"] = tokens
        if "num_fused_shared_experts" in taken:
            more["num_fused_shared_experts"] = values.get("num_fused_shared_experts") or 0
        check(values.get("routing_replay_out"), top_k, **more)
    size = hidden.shape[-1] * (2 if hidden.dtype == torch.uint8 else 1)
    valid = values.get("valid_hidden_size")
    if valid is not None and valid <= 0:
        raise ValueError("valid_hidden_size must be positive, got %s" % valid)
    if valid is not None and _fi_patch_round_up(valid, 128) > size:
        raise ValueError(
            "roundUp(valid_hidden_size, 128) must be <= padded hidden_size, got %s > %s"
            % (_fi_patch_round_up(valid, 128), size)
        )
    width = size if valid is None else valid
    if output is None:
        return hidden.new_empty((tokens, width), dtype=torch.bfloat16)
    if rule == "unchecked":
        return None
    expected = (tokens, size) if rule == "exact" else None
    if expected is not None and tuple(output.shape) != expected:
        raise ValueError("Invalid shape of output: expected %s, got %s" % (expected, output.shape))
    if output.dtype != torch.bfloat16:
        raise ValueError(
            "Invalid dtype of output: expected %s, got %s" % (torch.bfloat16, output.dtype)
        )
    if output.device != hidden.device:
        raise ValueError(
            "Invalid device of output: expected %s, got %s" % (hidden.device, output.device)
        )
    if rule == "narrow":
        assert output.shape[0] == tokens, "output.shape[0]=%s must be equal to %s" % (
            output.shape[0],
            tokens,
        )
        assert output.shape[1] <= size, "output.shape[1]=%s must be less than or equal to %s" % (
            output.shape[1],
            size,
        )
        if valid is not None and output.shape[1] != valid:
            raise ValueError(
                "output.shape[1] must equal valid_hidden_size=%s when valid_hidden_size is "
                "provided, got %s" % (valid, output.shape[1])
            )
    return None


# cutlass_fused_moe (flashinfer/fused_moe/core.py): the kernel module's op returns a list of four,
# as it allocates them: output (num_tokens, fc2_expert_weights.shape[1]) of output_dtype on the
# input's device, or the given one, which the function checks first (FlashInfer's
# check_shape_dtype_device, named as the patch's check: ValueError); then, unwritten outside the
# min-latency mode, int32 (1,), float32 (experts, num_tokens) and int32 (experts,), experts
# fc2_expert_weights.shape[0]. For a given output the fake gives those three, which its out op
# returns beside it. min_latency_mode raises NotImplementedError in every release, and
# profile_ids of other than two tactics ValueError (the kernel module's op, before its kernel),
# where the release reads them. The rule is how the release checks its tactics and its
# activation: "plain" (0.4.1 - 0.6.16.post2, 0.6.18 - 0.7.1: nothing of the activation before
# the device; before 0.6.16 no profile_ids), "tactics-ignored" (0.6.16.post3 - 0.6.17: the
# kernel module's op runs the autotuner whatever profile_ids says) or "clamped" (0.7.2 on:
# ClampedRelu2's limit, ValueError, and the kinds it takes, NotImplementedError; a limit without
# it, ValueError). What the device decides (the architecture's build, FP8 block scales and the
# Humming path on SM90 alone, ClampedRelu2 on SM10x), the autotuner and the kernel's own checks
# run in the op. Before 0.3.0 the kernel module's op returns a list of one, the output (the
# shape's returns), which the function checks with its _check_shape_dtype_device (the shape's
# check), after it refuses what the Blackwell build lacks, NotImplementedError: FP8 block scales
# and the min-latency mode, rule "one" (0.2.13 - 0.2.14.post1), and W4A8 group scaling and
# MXFP8 activations too, in the function's order, rule "one-w4a8" (0.2.9 - 0.2.12).
def _fi_patch_fake_cutlass_moe(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    source, fc2 = values["input"], values["fc2_expert_weights"]
    if rule in ("one", "one-w4a8"):
        return _fi_patch_fake_cutlass_moe_one(values, rule, check)
    if rule == "clamped":
        _fi_patch_clamped_relu2(values, check)
    if values.get("min_latency_mode"):
        raise NotImplementedError(_fi_patch_blackwell_lacks["min_latency_mode"] + " for Blackwell.")
    tokens, experts, dtype = source.shape[0], fc2.shape[0], values["output_dtype"]
    shape = (tokens, fc2.shape[1])
    output = values.get("output")
    if output is not None:
        check(output, shape, dtype, source.device, "output")
    profiles = values.get("profile_ids")
    if profiles is not None and len(profiles) != 2 and rule != "tactics-ignored":
        raise ValueError("profile_ids must contain [gemm1_profile, gemm2_profile]")
    others = (
        source.new_empty((1,), dtype=torch.int32),
        source.new_empty((experts, tokens), dtype=torch.float32),
        source.new_empty((experts,), dtype=torch.int32),
    )
    if output is None:
        return (source.new_empty(shape, dtype=dtype), *others)
    return others


def _fi_patch_fake_cutlass_moe_one(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    source, fc2 = values["input"], values["fc2_expert_weights"]
    refused = ["use_deepseek_fp8_block_scale", "min_latency_mode"]
    if rule == "one-w4a8":
        refused.insert(1, "use_w4a8_group_scaling")
        refused.append("use_mxfp8_act_scaling")
    for name in refused:
        if values.get(name):
            raise NotImplementedError(_fi_patch_blackwell_lacks[name] + " for Blackwell.")
    shape, dtype = (source.shape[0], fc2.shape[1]), values["output_dtype"]
    output = values.get("output")
    if output is None:
        return source.new_empty(shape, dtype=dtype)
    check(output, shape, dtype, source.device, "output")
    return None


_fi_patch_blackwell_lacks = {
    "use_deepseek_fp8_block_scale": "DeepSeek FP8 Block Scaling is not yet implemented in CUTLASS",
    "use_w4a8_group_scaling": "W4A8 Group Scaling is not yet implemented",
    "min_latency_mode": "min latency mode not yet implemented",
    "use_mxfp8_act_scaling": "mxfp8 not yet implemented",
}


# single_decode_with_kv_cache (flashinfer/decode.py), which the op asks for its lse too: out as the
# function allocates it, torch.empty_like(q) ((num_qo_heads, head_dim), q's dtype and strides; with
# use_tensor_cores, empty_like of q.unsqueeze(0) squeezed again, the same), and lse float32
# (num_qo_heads,). FlashInfer's checks of pos_encoding_mode and kv_layout run first (KeyError).
# The workspace, the alibi slopes and the kernel run in the op. One rule: "allocated" (0.2.6 on).
def _fi_patch_fake_single_decode(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    _fi_patch_attention_modes(values, check)
    q = values["q"]
    return torch.empty_like(q), q.new_empty((q.shape[0],), dtype=torch.float32)


# single_prefill_with_kv_cache (flashinfer/prefill.py), which the op asks for its lse too, without
# kv_cache_sf (a call that passes the KV cache's scale factors traces the function's body): the
# checks of pos_encoding_mode and kv_layout (KeyError), then for an FP8 query the function's
# asserts (no sliding window, one dtype and one head dim for q, k and v: AssertionError), then out
# as it allocates it, (qo_len, num_qo_heads, v's head dim), o_dtype (q's where None), contiguous,
# and lse float32 (qo_len, num_qo_heads). The backend's choice (it asks the device), the packing of
# custom_mask and the kernel run in the op. One rule: "allocated" (0.2.6 on).
def _fi_patch_fake_single_prefill(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    _fi_patch_attention_modes(values, check)
    q, k, v = values["q"], values["k"], values["v"]
    if q.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        assert values["window_left"] == -1
        assert q.dtype == k.dtype == v.dtype
        assert q.shape[-1] == k.shape[-1] == v.shape[-1]
    dtype = values["o_dtype"] if values["o_dtype"] is not None else q.dtype
    out = q.new_empty((*q.shape[:-1], v.shape[-1]), dtype=dtype)
    return out, q.new_empty((q.shape[0], q.shape[1]), dtype=torch.float32)


# BatchDecodeWithPagedKVCacheWrapper.run (flashinfer/decode.py), after plan(): the KV cache
# unpacked by FlashInfer's own _unpack_paged_kv_cache (check) in the wrapper's layout (a pair, or a
# 5-D tensor split on its second dimension; KeyError for anything else), then out as run()
# allocates it, q's shape but the last dimension v's head dim, in plan()'s o_data_type (q's dtype
# where plan() gave none), contiguous, and lse float32 (q.shape[0], num_qo_heads). Which backend
# runs, its checks against plan() (the dtypes, q_len_per_req) and the kernel run in the op. One
# rule: "planned" (0.6.0 on).
def _fi_patch_fake_batch_decode(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    q = values["q"]
    _, v = check(values["paged_kv_cache"], values["planned_kv_layout"])
    dtype = values["planned_o_data_type"] or q.dtype
    shaped = check.__globals__["check_shape_dtype_device"]
    lse, out = values.get("lse"), values.get("out")
    if values.get("return_lse") and lse is not None:
        shaped(lse, (q.shape[0], q.shape[1]), torch.float32, q.device, "lse")
    if out is not None:
        shaped(out, q.shape, dtype, q.device, "out")
    out = q.new_empty((*q.shape[:-1], v.shape[-1]), dtype=dtype)
    return out, q.new_empty((q.shape[0], q.shape[1]), dtype=torch.float32)


# BatchPrefillWithPagedKVCacheWrapper.run (flashinfer/prefill.py), after plan(), on the backends
# whose allocation run() does itself (fa2, fa3, cudnn, trtllm-gen; cute-dsl, 0.6.18 on, and
# cute-dsl-prims, 0.7.0 on, allocate their own way: left to run()'s body, `_fi_patch_unpatched`):
# the cache unpacked by FlashInfer's own _unpack_paged_kv_cache (check) in the wrapper's layout
# (KeyError); lse_base and lse_layout checked by FlashInfer's own check_lse_base and
# check_lse_layout where the release has them (0.7.1 on); an out given of another dtype than
# plan()'s refused with run()'s message; an lse given checked as run() checks it ((tokens,
# heads) float32; (heads, tokens), contiguous, for lse_layout "HN") and an out given (q's shape
# but v's head dim, plan()'s dtype), each a ValueError. Then out as run() allocates it, q's shape
# but v's head dim, in plan()'s o_data_type (q's dtype where plan() gave none), contiguous, and
# lse float32 in its layout. Which kernel runs, its checks against plan() (the dtypes, q's token
# count) and the kernel run in the op. One rule: "planned" (0.6.0 on).
def _fi_patch_fake_batch_prefill(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    q = values["q"]
    _, v = check(values["paged_kv_cache"], values["planned_kv_layout"])
    lse_shape = _fi_patch_lse_layout(values, check.__globals__)
    shaped = check.__globals__["check_shape_dtype_device"]
    planned, out = values["planned_o_data_type"], values.get("out")
    dtype, shape = planned or q.dtype, (*q.shape[:-1], v.shape[-1])
    if out is not None and planned is not None and out.dtype != planned:
        raise ValueError(
            "The dtype of out %s does not match the o_data_type %s specified in plan function."
            % (out.dtype, planned)
        )
    _fi_patch_lse_given(values, lse_shape, shaped)
    if out is not None:
        shaped(out, shape, dtype, q.device, "out")
    return q.new_empty(shape, dtype=dtype), q.new_empty(lse_shape, dtype=torch.float32)


# BatchPrefillWithRaggedKVCacheWrapper.run (flashinfer/prefill.py), after plan(), on the backends
# that write the out run() allocates or is given (fa2, fa3, cudnn, cutlass, fmha_v2, a JIT
# variant; cute-dsl, cute-dsl-prims and cutile are left to run()'s body, `_fi_patch_unpatched`):
# lse_base and lse_layout checked by FlashInfer's own check_lse_base and check_lse_layout where
# the release has them (0.7.1 on); an lse given checked as run() checks it ((tokens, heads)
# float32; (heads, tokens), contiguous, for lse_layout "HN") and an out given (q's shape but v's
# head dim), each a ValueError from FlashInfer's own check_shape_dtype_device (check). out's dtype
# by rule: "q-dtype" (0.6.0 on) allocates bfloat16 for an 8-bit q and q's dtype otherwise, and
# checks an out given against plan()'s o_data_type; "planned-16-bit" (0.7.0 on) takes plan()'s
# o_data_type for both, unless it is None or 8-bit, then as "q-dtype" allocates. Its checks
# against plan() (the dtypes, q's token count) and the kernel run in the op.
def _fi_patch_fake_batch_ragged(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    q, v = values["q"], values["v"]
    lse_shape = _fi_patch_lse_layout(values, check.__globals__)
    planned, out = values["planned_o_data_type"], values.get("out")
    made = torch.bfloat16 if q.dtype.itemsize == 1 else q.dtype
    if rule == "planned-16-bit" and planned is not None and planned.itemsize != 1:
        made = planned
    given = planned if rule == "q-dtype" else made
    shape = (*q.shape[:-1], v.shape[-1])
    _fi_patch_lse_given(values, lse_shape, check)
    if out is not None:
        check(out, shape, given, q.device, "out")
    return q.new_empty(shape, dtype=made), q.new_empty(lse_shape, dtype=torch.float32)


# trtllm_batch_decode_with_kv_cache (flashinfer/decode.py), stateless, on the backends whose
# allocation the function does itself (xqa, trtllm-gen; the backend FlashInfer's own
# get_compute_capability chooses for "auto", trtllm-gen on SM10x, as the function does): out as
# it allocates it, torch.empty_like(query) (query's shape and strides) in out_dtype, else the out
# given's dtype, else query's; lse float32 (query.shape[0], num_qo_heads). On trtllm-gen an
# out_dtype other than query's, float16 or bfloat16 is refused (ValueError), and an out given is
# checked by FlashInfer's own check_shape_dtype_device (check), an lse given too (by rule
# "lse-asked", 0.6.12, only with return_lse, which alone writes it; by rule "lse-given", 0.6.13 on,
# whenever given). xqa refuses lse (NotImplementedError, 0.6.12 on). Rule "no-lse" (0.6.0 -
# 0.6.11.post3): no lse at all. The nvfp4 output (an FP4Tensor out, out_dtype "nvfp4") has no
# schema type and is traced as the function's body; the DCP speculative decode and the cake
# backend are left to it too (`_fi_patch_unpatched`). The function's other checks run in the op:
# a call refused for two reasons may be refused for the other one first there.
def _fi_patch_fake_trtllm_decode(values: "Dict[str, Any]", rule: "str", check: "Any") -> "Any":
    query, out, lse = values["query"], values["out"], values.get("lse")
    backend, asked = values["backend"], bool(values.get("return_lse"))
    if backend == "auto":
        major = check.__globals__["get_compute_capability"](query.device)[0]
        backend = "trtllm-gen" if major == 10 else "xqa"
    if backend not in ("xqa", "trtllm-gen"):
        raise KeyError("Backend %s not supported" % backend)
    if backend == "xqa" and rule != "no-lse" and (asked or lse is not None):
        raise NotImplementedError("xqa backend does not support return_lse/lse output")
    dtype = values["out_dtype"]
    if dtype is None:
        dtype = out.dtype if out is not None else query.dtype
    lse_shape = (query.shape[0], query.shape[1])
    if backend == "trtllm-gen":
        if dtype not in (query.dtype, torch.float16, torch.bfloat16):
            raise ValueError("Unsupported out_dtype: %s" % dtype)
        if out is not None:
            check(out, query.shape, dtype, query.device, "out")
        if lse is not None and (asked or rule == "lse-given"):
            check(lse, lse_shape, torch.float32, query.device, "lse")
    return torch.empty_like(query, dtype=dtype), query.new_empty(lse_shape, dtype=torch.float32)


# The prefill wrappers' lse, as their run() checks it: lse_base and lse_layout by FlashInfer's own
# check_lse_base and check_lse_layout where the release has them (0.7.1 on, in `namespace`, the
# module's globals); then its shape, (tokens, heads), or (heads, tokens) for lse_layout "HN".
def _fi_patch_lse_layout(values: "Dict[str, Any]", namespace: "Dict[str, Any]") -> "Any":
    for checked in ("lse_base", "lse_layout"):
        checker = namespace.get("check_" + checked)
        if checked in values and checker is not None:
            checker(values[checked])
    q = values["q"]
    if values.get("lse_layout") == "HN":
        return (q.shape[1], q.shape[0])
    return (q.shape[0], q.shape[1])


# An lse given with return_lse, checked as run() checks it by FlashInfer's own
# check_shape_dtype_device (`shaped`): float32 of `lse_shape`, and contiguous for "HN".
def _fi_patch_lse_given(values: "Dict[str, Any]", lse_shape: "Any", shaped: "Any") -> "None":
    lse, q = values.get("lse"), values["q"]
    if values.get("return_lse") and lse is not None:
        shaped(lse, lse_shape, torch.float32, q.device, "lse")
        if values.get("lse_layout") == "HN" and not lse.is_contiguous():
            raise ValueError('lse for lse_layout="HN" must be contiguous')


# The calls a method's fake does not follow, by fake: they are traced as the method's own body.
# The wrappers' run() scales an FP8 out by v_scale into a copy (every release 0.6.0 on, on every
# backend but 0.7.4's trtllm-gen, which scales in its kernel; the op leaves them all out): the op,
# which writes the out given, could not return it.
def _fi_patch_fp8_out_scaled(values: "Dict[str, Any]") -> "bool":
    out, scale = values.get("out"), values.get("v_scale")
    eight = (torch.float8_e4m3fn, torch.float8_e5m2)
    # As run() tests it: any v_scale but the float 1.0 (a tensor too) scales.
    one = isinstance(scale, float) and scale == 1.0
    return out is not None and out.dtype in eight and scale is not None and not one


# The prefill wrapper's run() on the backends that allocate their own way: cute-dsl (0.6.18 on)
# gives bfloat16 for an FP8 q and its kernel's scratch otherwise, cute-dsl-prims (0.7.0 on) q's
# shape whatever v's head dim; neither runs on a host fi-patch can check their allocation on.
def _fi_patch_prefill_unfollowed(values: "Dict[str, Any]") -> "bool":
    own = values.get("planned_backend") in ("cute-dsl", "cute-dsl-prims")
    return own or _fi_patch_fp8_out_scaled(values)


# The ragged prefill wrapper's run() on the backends a wrapper is planned for only when asked by
# name, whose kernels live outside FlashInfer's JIT modules and were never run where fi-patch can
# check what they return: cute-dsl (0.6.8 on), cute-dsl-prims and cutile (0.7.0 on). cutlass and
# fmha_v2, which `auto` chooses on SM100 and SM120, return the out (and lse) run() gives them.
def _fi_patch_ragged_unfollowed(values: "Dict[str, Any]") -> "bool":
    return values.get("planned_backend") in ("cute-dsl", "cute-dsl-prims", "cutile")


# trtllm_batch_decode_with_kv_cache's calls that allocate or return otherwise: the DCP
# speculative decode (causal_seqlens_kv_global given, 0.7.0 on: a bfloat16 out, an lse it
# demands), and the cake backend (0.7.1 on, chosen only by name: 0.7.4's aligned cake kernels
# return out alone whatever return_lse says).
def _fi_patch_trtllm_decode_unfollowed(values: "Dict[str, Any]") -> "bool":
    return values.get("backend") == "cake" or values.get("causal_seqlens_kv_global") is not None


def _fi_patch_never(values: "Dict[str, Any]") -> "bool":
    return False


# FlashInfer's own _check_pos_encoding_mode and _check_kv_layout, as the attention functions run
# them first: the patch names the second (`check`), and the first is its neighbour in
# flashinfer/utils.py (every release).
def _fi_patch_attention_modes(values: "Dict[str, Any]", check: "Any") -> "None":
    check.__globals__["_check_pos_encoding_mode"](values["pos_encoding_mode"])
    check(values["kv_layout"])


# The checks of ClampedRelu2 (ActivationType.ClampedRelu2) from 0.7.2, those the device does not
# decide.
def _fi_patch_clamped_relu2(values: "Dict[str, Any]", check: "Any") -> "None":
    import importlib

    ActivationType = importlib.import_module("flashinfer.tllm_enums").ActivationType
    source, limit = values["input"], values.get("clamped_relu2_limit")
    if int(values["activation_type"]) != int(ActivationType.ClampedRelu2):
        if limit is not None:
            raise ValueError(
                "clamped_relu2_limit is supported only with ActivationType.ClampedRelu2"
            )
        return
    if limit is None:
        raise ValueError(
            "ActivationType.ClampedRelu2 requires a one-element clamped_relu2_limit tensor"
        )
    if limit.ndim != 1 or limit.numel() != 1:
        raise ValueError(
            "ActivationType.ClampedRelu2 requires model-wide clamped_relu2_limit with shape (1,), "
            "got %s" % (tuple(limit.shape),)
        )
    check(limit, (1,), torch.float32, source.device, "ClampedRelu2 clamped_relu2_limit")
    if any(values.get(k) is not None for k in ("swiglu_alpha", "swiglu_beta", "swiglu_limit")):
        raise ValueError("ActivationType.ClampedRelu2 does not accept SwiGLU activation parameters")
    if values.get("situ_beta") is not None or values.get("situ_linear_beta") is not None:
        raise ValueError("ActivationType.ClampedRelu2 does not accept SiTU activation parameters")
    # Below SM10x the op refuses it for the device, with the same exception as these.
    bf16 = source.dtype == torch.bfloat16 and values["fc1_expert_weights"].dtype == torch.bfloat16
    if not (values.get("use_mxfp8_act_scaling") or bf16):
        raise NotImplementedError("ClampedRelu2 supports only BF16xBF16 or MXFP8xMXFP8 MoE")
    if values.get("fc1_expert_biases") is not None or values.get("min_latency_mode"):
        raise NotImplementedError("ClampedRelu2 does not support FC1 bias or min-latency mode")


# The activations FP8 with per-channel scales takes, by rule.
_fi_patch_moe_activations = {
    "per-channel": (torch.bfloat16, torch.float16, torch.float8_e4m3fn),
    "per-channel-fp8": (torch.float8_e4m3fn,),
}

_FiPatchFake = Callable[[Dict[str, Any], str, Any], Any]

# The rules each fake knows: a patch naming another is refused when the registry loads it, and
# an entry point given one is left as it is.
_fi_patch_boundary_rules = {
    "act_and_mul": ("16-bytes", "even"),
    "mm_fp4": ("checked",),
    "bmm_fp8": ("checked",),
    "mm_fp8": ("trtllm-only", "backends"),
    "fp4_quantize": ("five", "unpadded", "padded"),
    "mxfp8_quantize": ("cute-128x4", "cute-layouts", "auto"),
    "nvfp4_batched": ("allocated",),
    "nvfp4_grouped": ("allocated",),
    "nvfp4_silu_experts": ("allocated",),
    "block_scale_interleave": ("allocated",),
    "sampling": ("allocated",),
    "renorm": ("float32", "workspace", "input-dtype"),
    "concat_mla_k": ("default", "backends"),
    "fused_topk_deepseek": ("checked",),
    "trtllm_moe": ("exact", "narrow", "unchecked", "per-channel", "per-channel-fp8"),
    "cutlass_moe": ("plain", "tactics-ignored", "clamped", "one", "one-w4a8"),
    "single_decode": ("allocated",),
    "single_prefill": ("allocated",),
    "batch_decode": ("planned",),
    "batch_prefill": ("planned",),
    "batch_ragged": ("q-dtype", "planned-16-bit"),
    "trtllm_decode": ("no-lse", "lse-asked", "lse-given"),
}

# What a method's fake reads of its wrapper, by fake: the op's parameter, the wrapper's attribute
# (None where the wrapper has none) and its type.
_fi_patch_planned: "Dict[str, Tuple[Tuple[str, str, Any], ...]]" = {
    "batch_decode": (
        ("planned_kv_layout", "_kv_layout", str),
        ("planned_o_data_type", "_cached_o_data_type", Optional[torch.dtype]),
    ),
    "batch_prefill": (
        ("planned_kv_layout", "_kv_layout", str),
        ("planned_o_data_type", "_cached_o_data_type", Optional[torch.dtype]),
        ("planned_backend", "_backend", str),
    ),
    "batch_ragged": (
        ("planned_o_data_type", "_cached_o_data_type", Optional[torch.dtype]),
        ("planned_backend", "_backend", str),
    ),
}

_fi_patch_unpatched = {
    "batch_decode": _fi_patch_fp8_out_scaled,
    "batch_prefill": _fi_patch_prefill_unfollowed,
    "batch_ragged": _fi_patch_ragged_unfollowed,
    "trtllm_decode": _fi_patch_trtllm_decode_unfollowed,
}

_fi_patch_boundary_fakes: "Dict[str, _FiPatchFake]" = {
    "act_and_mul": _fi_patch_fake_act_and_mul,
    "mm_fp4": _fi_patch_fake_mm_fp4,
    "bmm_fp8": _fi_patch_fake_bmm_fp8,
    "mm_fp8": _fi_patch_fake_mm_fp8,
    "fp4_quantize": _fi_patch_fake_fp4_quantize,
    "mxfp8_quantize": _fi_patch_fake_mxfp8_quantize,
    "nvfp4_batched": _fi_patch_fake_nvfp4_batched,
    "nvfp4_grouped": _fi_patch_fake_nvfp4_grouped,
    "nvfp4_silu_experts": _fi_patch_fake_nvfp4_silu_experts,
    "block_scale_interleave": _fi_patch_fake_block_scale_interleave,
    "sampling": _fi_patch_fake_sampling,
    "renorm": _fi_patch_fake_renorm,
    "concat_mla_k": _fi_patch_fake_concat_mla_k,
    "fused_topk_deepseek": _fi_patch_fake_fused_topk_deepseek,
    "trtllm_moe": _fi_patch_fake_trtllm_moe,
    "cutlass_moe": _fi_patch_fake_cutlass_moe,
    "single_decode": _fi_patch_fake_single_decode,
    "single_prefill": _fi_patch_fake_single_prefill,
    "batch_decode": _fi_patch_fake_batch_decode,
    "batch_prefill": _fi_patch_fake_batch_prefill,
    "batch_ragged": _fi_patch_fake_batch_ragged,
    "trtllm_decode": _fi_patch_fake_trtllm_decode,
}
