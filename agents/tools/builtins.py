"""Built-in tools, which need no setup: ``calculator`` (a safe evaluator: Python's own parser,
then only numbers, arithmetic and a list of math functions; never ``eval``), ``current_time``,
``knowledge_search`` (the agent's own knowledge bases, as a tool), and the memory tools
``remember`` and ``recall`` (an agent whose ``memory`` is on has ``remember`` whatever its
tools say)."""

from __future__ import annotations

import ast
import datetime as dt
import math
import operator
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings

from agents import selectors, services
from agents.infra.database import run_db
from agents.kernel.exceptions import GaiaError
from agents.models import BUILTIN_TOOLS
from agents.tools.base import BUILTIN, Runner, ToolContext, ToolResult, ToolSpec

# The calculator's worst case is small by these bounds, checked before each step's work (the
# rule of agents.tools.base): an expression of at most MAX_EXPRESSION characters has at most
# about 250 steps, and every whole number in it stays within MAX_MAGNITUDE (at most 997 bits):
# a literal, a function's result and each operation's result are checked, a power's size is
# estimated from its operands' bit lengths before it is computed, round's digits and
# factorial's argument are bounded before the call. So no step handles a number of more than
# about 2,000 bits, and a whole expression costs what parsing 500 characters costs: the
# slowest found (500 nested minus signs, 24 round(10**300, -400) added up) took under 2 ms on
# a loaded 2-core machine (``round(1, -10**7)`` took 8 s before, ``factorial(1000)**1000``
# 1 s). That is less than a thread hop would add, so it runs on the event loop.
MAX_EXPRESSION = 500
MAX_EXPONENT = 1000  # 10**1000 is computed at once; 10**(10**9) would hold a core for minutes
MAX_MAGNITUDE = 1e300
MAX_BITS = 1000  # a power whose whole-number result would be longer is refused uncomputed
MAX_ROUND_DIGITS = 400  # round(x, -n) computes 10**n: round(1, -10**7) held the loop 8 s
MAX_FACTORIAL = 166  # 166! is about 9e297, within MAX_MAGNITUDE

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.Pow: operator.pow}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS = {"sqrt": math.sqrt, "log": math.log, "log10": math.log10, "log2": math.log2,
              "exp": math.exp, "sin": math.sin, "cos": math.cos, "tan": math.tan,
              "asin": math.asin, "acos": math.acos, "atan": math.atan, "floor": math.floor,
              "ceil": math.ceil, "abs": abs, "round": round, "min": min, "max": max,
              "factorial": math.factorial}
_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau}


class CalculatorError(ValueError):
    pass


def calculate(expression: str) -> int | float:
    """The value of an arithmetic ``expression`` (``2 * (3 + 4) ** 2``, ``sqrt(2) / pi``).
    Raises :class:`CalculatorError` for anything else, saying what."""
    if len(expression) > MAX_EXPRESSION:
        raise CalculatorError(f"the expression is longer than {MAX_EXPRESSION} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
        value = _evaluate(tree.body)
    except SyntaxError as exc:
        raise CalculatorError(f"not an arithmetic expression ({exc.msg})") from None
    except (RecursionError, MemoryError):
        raise CalculatorError("the expression is nested too deeply") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is not a finite number")
    return value


def _bounded(value: Any) -> Any:
    """``value``, if it is a real number within :data:`MAX_MAGNITUDE`."""
    if isinstance(value, complex) or abs(value) > MAX_MAGNITUDE:
        raise CalculatorError("the result is out of range")
    return value


def _whole(value: Any) -> Any:
    """``value``, if it is not a whole number beyond :data:`MAX_MAGNITUDE` (a float has a
    fixed size whatever its value; a whole number grows, and so does every step on it)."""
    return _bounded(value) if isinstance(value, int) else value


def _evaluate(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return _whole(node.value)
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        try:
            value = _BINARY[type(node.op)](left, right)
        except (ZeroDivisionError, OverflowError, ValueError) as exc:
            raise CalculatorError(str(exc)) from None
        return _bounded(value)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCTIONS and not node.keywords):
        name = node.func.id
        args = [_evaluate(a) for a in node.args]
        if name == "factorial" and (len(args) != 1 or not isinstance(args[0], int)
                                    or not 0 <= args[0] <= MAX_FACTORIAL):
            raise CalculatorError(f"factorial takes one whole number from 0 to {MAX_FACTORIAL}")
        if name == "round" and len(args) == 2 and not (
                isinstance(args[1], int) and abs(args[1]) <= MAX_ROUND_DIGITS):
            raise CalculatorError(f"round's digits are a whole number from "
                                  f"-{MAX_ROUND_DIGITS} to {MAX_ROUND_DIGITS}")
        try:
            return _whole(_FUNCTIONS[name](*args))
        except (TypeError, ValueError, OverflowError) as exc:
            raise CalculatorError(f"{name}: {exc}") from None
    raise CalculatorError(f"'{ast.unparse(node)}' is not allowed: numbers, + - * / // % **, "
                          f"parentheses, {', '.join(sorted(_CONSTANTS))} and "
                          f"{', '.join(sorted(_FUNCTIONS))}")


def _check_power(base: Any, exponent: Any) -> None:
    """Refuse a power too large to compute, before computing it: an exponent past
    :data:`MAX_EXPONENT`, or a whole-number result of more than :data:`MAX_BITS` bits (its
    length is about the base's bit length times the exponent)."""
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"exponents are at most {MAX_EXPONENT}")
    if (isinstance(base, int) and isinstance(exponent, int) and exponent > 0
            and (abs(base).bit_length() - 1) * exponent > MAX_BITS):
        raise CalculatorError("the result is out of range")


async def _calculator(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    expression = str(args.get("expression", ""))
    if len(expression) > MAX_EXPRESSION:  # the size bound, on the loop, before any work
        return ToolResult(f"calculator: the expression is longer than {MAX_EXPRESSION} "
                          "characters", is_error=True)
    try:
        return ToolResult(repr(calculate(expression)))
    except CalculatorError as exc:
        return ToolResult(f"calculator: {exc}", is_error=True)


async def _current_time(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    name = str(args.get("timezone") or "UTC")
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return ToolResult(f"current_time: unknown time zone {name!r} (an IANA name such as "
                          "Europe/Paris)", is_error=True)
    now = dt.datetime.now(zone)
    return ToolResult(f"{now.isoformat(timespec='seconds')} ({name}, {now:%A})")


async def _knowledge_search(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    ids = getattr(ctx.agent, "knowledge_base_ids", None)
    query = str(args.get("query") or "").strip()
    if not ids:
        return ToolResult("knowledge_search: this agent has no knowledge base", is_error=True)
    if not query:
        return ToolResult("knowledge_search: give a query", is_error=True)
    passages = await selectors.knowledge_search(knowledge_base_ids=ids, query=query)
    if not passages:
        return ToolResult("No passage matches.")
    return ToolResult("\n\n".join(f"[{n}] ({p['source']}) {p['text']}"
                                  for n, p in enumerate(passages, start=1)))


async def _remember(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    fact = str(args.get("fact") or "").strip()
    if ctx.memory_scope is None:
        return ToolResult("remember: this agent keeps no memory for this conversation "
                          "(its memory is off, or the request names no user)", is_error=True)
    if not fact:
        return ToolResult("remember: give the fact to remember", is_error=True)
    try:
        row = await run_db(services.memory_remember, agent=ctx.agent, scope=ctx.memory_scope,
                           text=fact, thread_id=ctx.thread_id)
    except GaiaError as exc:  # too long
        return ToolResult(f"remember: {exc.message}", is_error=True)
    if row.forgotten:
        return ToolResult(f"Remembered (the oldest fact was forgotten: at most "
                          f"{settings.GAIA_MEMORY_MAX_FACTS} are kept).")
    return ToolResult("Remembered.")


async def _recall(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    if ctx.memory_scope is None:
        return ToolResult("recall: this agent keeps no memory for this conversation",
                          is_error=True)
    facts = await selectors.memory_search(agent_id=ctx.agent.pk, scope=ctx.memory_scope,
                                          query=str(args.get("query") or ""), limit=10)
    return ToolResult("\n".join(f"- {f}" for f in facts) or "Nothing remembered.")


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str],
          run: Runner) -> ToolSpec:
    return ToolSpec(name=name, description=description, server=BUILTIN, tool=name, run=run,
                    parameters={"type": "object", "properties": properties,
                                "required": required, "additionalProperties": False})


BUILTINS: dict[str, ToolSpec] = {spec.name: spec for spec in (
    _spec("calculator", "Evaluate an arithmetic expression exactly (numbers, + - * / // % **, "
          "parentheses, pi, e, sqrt, log, sin, cos, tan, floor, ceil, abs, round, min, max).",
          {"expression": {"type": "string", "description": "e.g. 2 * (3 + 4) ** 2"}},
          ["expression"], _calculator),
    _spec("current_time", "The current date and time in a time zone.",
          {"timezone": {"type": "string", "description": "An IANA name, e.g. Europe/Paris "
                                                         "(default UTC)."}}, [], _current_time),
    _spec("knowledge_search", "Search this agent's knowledge bases; the best passages with "
          "their sources.", {"query": {"type": "string"}}, ["query"], _knowledge_search),
    _spec("remember", "Remember a fact about the user or the conversation for later "
          "conversations.", {"fact": {"type": "string", "description": "One short fact."}},
          ["fact"], _remember),
    _spec("recall", "The facts remembered from earlier conversations that match a query.",
          {"query": {"type": "string"}}, [], _recall),
)}
assert set(BUILTINS) == set(BUILTIN_TOOLS), "agents.models.BUILTIN_TOOLS lists the built-ins"
