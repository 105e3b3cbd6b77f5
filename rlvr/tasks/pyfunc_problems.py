"""The templates of the `pyfunc` task (rlvr.tasks.pyfunc), four levels from one-line string and list
operations to small algorithms.

A template is parameterised by the function's name, its parameters' names and its constants; `doc`
and `body` are str.format templates over {a} / {b} (the parameters) and the constants (a tuple
constant is indexed: {order[1]}). `fn` is the oracle that decides expected outputs, written apart
from `body` (the reference the model should write), so the test that runs every reference through
the sandbox also checks the two agree. `gen` draws random arguments, `edges` the edge cases that go
first into the hidden tests.
"""
from __future__ import annotations

import collections
import itertools
import random
import string
from dataclasses import dataclass
from typing import Callable

LETTERS = tuple(string.ascii_lowercase)
TEXT, SENT = ("text", "s", "word"), ("sentence", "text", "line")
LIST, INT = ("nums", "values", "xs"), ("n", "num", "number")
WORDS = ("fizz", "buzz", "ping", "pong", "zap", "zip", "boom", "bang")


@dataclass(frozen=True)
class Template:
    key: str
    names: tuple[str, ...]  # choices of the function's name
    params: tuple[tuple[str, tuple[str, ...]], ...]  # (annotation, choices of the name) per parameter
    returns: str  # return annotation
    doc: str  # what the function returns, after "that"
    body: str  # the reference body, unindented
    fn: Callable  # oracle: fn(c, *args), c the constants as attributes
    gen: Callable  # gen(rng, c) -> a tuple of random arguments
    consts: tuple[tuple[str, tuple], ...] = ()  # (name, choices) per constant
    edges: Callable = lambda c: []  # c -> argument tuples tried first as hidden cases
    ok: Callable = lambda c: True  # c -> whether this combination of constants is allowed


# ---- random arguments --------------------------------------------------------------------------

def letters(r: random.Random, *must: str, extra: int = 3) -> str:
    """The letters `must` and `extra` other random ones: an alphabet for words that hit the constants."""
    return "".join(must) + "".join(r.sample([x for x in LETTERS if x not in must], extra))


def word(r: random.Random, pool: str, lo: int, hi: int) -> str:
    return "".join(r.choice(pool) for _ in range(r.randint(lo, hi)))


def sentence(r: random.Random, lo: int, hi: int, pool: str = string.ascii_lowercase) -> str:
    return " ".join(word(r, pool, 1, 8) for _ in range(r.randint(lo, hi)))


def ints(r: random.Random, lo: int, hi: int, nlo: int, nhi: int) -> list[int]:
    return [r.randint(lo, hi) for _ in range(r.randint(nlo, nhi))]


def number(r: random.Random, pool: str, lo: int, hi: int) -> int:
    """A non-negative integer of lo..hi digits drawn from `pool` (no leading zero)."""
    return int(word(r, pool, lo, hi).lstrip("0") or "0")


def runs(r: random.Random, pool: str, n: int) -> str:
    return "".join(r.choice(pool) * r.randint(1, 4) for _ in range(r.randint(1, n)))


def brackets(r: random.Random, pair: str) -> str:
    return "".join(r.choice(pair + pair + "xy") for _ in range(r.randint(2, 10)))


def _rle(s: str, char_first: bool, sep: str) -> str:
    groups = [(ch, len(list(g))) for ch, g in itertools.groupby(s)]
    return sep.join(ch + str(n) if char_first else str(n) + ch for ch, n in groups)


def _caesar(s: str, k: int) -> str:
    shifted = string.ascii_lowercase[k:] + string.ascii_lowercase[:k]
    return s.translate(str.maketrans(string.ascii_lowercase, shifted))


def _fizz(c, n: int) -> list[str]:
    return [(c.w1 if i % c.p == 0 else "") + (c.w2 if i % c.q == 0 else "") or str(i) for i in range(1, n + 1)]


def _depth(c, s: str) -> int:
    depth, best = 0, 0
    for ch in s:
        depth += (ch == c.pair[0]) - (ch == c.pair[1])
        best = max(best, depth)
        if depth < 0:
            return -1
    return best if depth == 0 else -1


def _base(n: int, b: int) -> str:
    return str(n) if n < b else _base(n // b, b) + str(n % b)


def _streak(xs: list[int], test: Callable) -> int:
    return max((len(list(g)) for hit, g in itertools.groupby(xs, key=test) if hit), default=0)


def _repeat_sum(c, n: int) -> int:
    return n if n < c.k else _repeat_sum(c, sum(map(int, str(n))))


def _pick(c, s: str) -> str:
    if not s:
        return ""
    counts = collections.Counter(s)
    target = (max if c.which[0] == "most" else min)(counts.values())
    tied = sorted(ch for ch in counts if counts[ch] == target)
    return tied[0] if c.tie[0].startswith("first") else tied[-1]


def _prime(i: int) -> bool:
    return i > 1 and all(i % d for d in range(2, i))


_CMP = {">": lambda v, k: v > k, "<": lambda v, k: v < k, "==": lambda v, k: v == k}
_PAIRS = [(p, q) for p in range(2, 8) for q in range(p + 1, 8) if q % p]


# ---- levels ------------------------------------------------------------------------------------

LEVEL_1 = (
    Template("count_letter", ("count_letter", "letter_count", "count_occurrences"), (("str", TEXT),), "int",
             "returns how many times the letter '{ch}' appears in {a}", "return {a}.count('{ch}')",
             lambda c, s: sum(x == c.ch for x in s), lambda r, c: (word(r, letters(r, c.ch), 2, 10),),
             (("ch", LETTERS),), lambda c: [("",), (c.ch * 4,), (c.ch.upper() + "b",)]),
    Template("add_each", ("add_to_all", "shift_all", "add_constant"), (("list[int]", LIST),), "list[int]",
             "returns a new list with {k} added to every element of {a}", "return [v + {k} for v in {a}]",
             lambda c, xs: [v + c.k for v in xs], lambda r, c: (ints(r, -20, 50, 2, 6),),
             (("k", tuple(range(1, 41))),), lambda c: [([],), ([0],)]),
    Template("keep_greater", ("keep_greater", "filter_above", "greater_than"), (("list[int]", LIST),), "list[int]",
             "returns the elements of {a} that are greater than {k}, in their original order",
             "return [v for v in {a} if v > {k}]", lambda c, xs: list(filter(lambda v: v > c.k, xs)),
             lambda r, c: (ints(r, c.k - 15, c.k + 15, 3, 8),), (("k", tuple(range(-10, 41))),),
             lambda c: [([],), ([c.k],), ([c.k + 1, c.k, c.k - 1],)]),
    Template("repeat_join", ("repeat_text", "repeat_word", "echo"), (("str", TEXT),), "str",
             "returns {a} repeated {k} times, joined by '{sep}'", "return '{sep}'.join([{a}] * {k})",
             lambda c, s: c.sep.join(s for _ in range(c.k)), lambda r, c: (word(r, "abcdefgh", 1, 5),),
             (("k", (2, 3, 4, 5, 6)), ("sep", ("-", ",", " ", "+", "|", "/", ":"))), lambda c: [("",), ("z",)]),
    Template("sum_divisible", ("sum_multiples", "sum_divisible", "total_of_multiples"), (("list[int]", LIST),),
             "int", "returns the sum of the elements of {a} that are divisible by {k}",
             "return sum(v for v in {a} if v % {k} == 0)", lambda c, xs: sum(v for v in xs if not v % c.k),
             lambda r, c: (ints(r, -30, 60, 3, 8),), (("k", tuple(range(2, 13))),),
             lambda c: [([],), ([c.k, -c.k, 0],), ([1],)]),
    Template("first_chars", ("take_start", "head", "prefix"), (("str", TEXT),), "str",
             "returns the first {k} characters of {a} (all of {a} when it is shorter)", "return {a}[:{k}]",
             lambda c, s: "".join(s[i] for i in range(min(c.k, len(s)))),
             lambda r, c: (word(r, "abcdefghij", 1, 12),), (("k", tuple(range(1, 9))),),
             lambda c: [("",), ("q" * c.k,)]),
    Template("last_chars", ("take_end", "tail", "suffix"), (("str", TEXT),), "str",
             "returns the last {k} characters of {a} (all of {a} when it is shorter)", "return {a}[-{k}:]",
             lambda c, s: s[max(0, len(s) - c.k):], lambda r, c: (word(r, "abcdefghij", 1, 12),),
             (("k", tuple(range(1, 9))),), lambda c: [("",), ("q" * c.k,)]),
    Template("replace_letter", ("replace_letter", "swap_letter", "substitute"), (("str", TEXT),), "str",
             "returns {a} with every '{old}' replaced by '{new}'", "return {a}.replace('{old}', '{new}')",
             lambda c, s: "".join(c.new if x == c.old else x for x in s),
             lambda r, c: (word(r, letters(r, c.old, c.new), 2, 10),), (("old", LETTERS), ("new", LETTERS)),
             lambda c: [("",), (c.old * 3,), (c.new + c.old.upper(),)], lambda c: c.old != c.new),
    Template("scale_each", ("scale_all", "multiply_all", "times_each"), (("list[int]", LIST),), "list[int]",
             "returns a new list with every element of {a} multiplied by {k}", "return [v * {k} for v in {a}]",
             lambda c, xs: [v * c.k for v in xs], lambda r, c: (ints(r, -20, 30, 2, 6),),
             (("k", tuple(range(2, 16))),), lambda c: [([],), ([0, 1],)]),
    Template("count_below", ("count_below", "how_many_below", "count_smaller"), (("list[int]", LIST),), "int",
             "returns how many elements of {a} are less than {k}", "return sum(1 for v in {a} if v < {k})",
             lambda c, xs: len([v for v in xs if v < c.k]), lambda r, c: (ints(r, c.k - 12, c.k + 12, 3, 8),),
             (("k", tuple(range(-10, 41))),), lambda c: [([],), ([c.k],), ([c.k - 1] * 3,)]),
)

LEVEL_2 = (
    Template("count_digit", ("count_digit", "digit_count", "count_digit_occurrences"), (("int", INT),), "int",
             "returns how many digits of the non-negative integer {a} are equal to {d}",
             "return str({a}).count('{d}')", lambda c, n: [int(x) for x in str(n)].count(c.d),
             lambda r, c: (number(r, f"{c.d}{c.d}" + "".join(r.sample("0123456789", 3)), 1, 7),),
             (("d", tuple(range(10))),), lambda c: [(0,), (c.d,), (100,), (int(f"{c.d}{c.d}9{c.d}"),)]),
    Template("digit_sum_over", ("sum_big_digits", "digit_sum_over", "sum_large_digits"), (("int", INT),), "int",
             "returns the sum of the digits of the non-negative integer {a} that are greater than {k}",
             "return sum(int(d) for d in str({a}) if int(d) > {k})",
             lambda c, n: sum(d for d in map(int, str(n)) if d > c.k), lambda r, c: (r.randint(0, 10 ** 7),),
             (("k", tuple(range(8))),), lambda c: [(0,), (c.k,), (99,), (10 ** 6,)]),
    Template("reverse_number", ("reverse_digits", "flip_number", "mirror_number"), (("int", INT),), "int",
             "returns the number whose digits are those of the non-negative integer {a} in reverse order "
             "(leading zeros dropped)", "return int(str({a})[::-1])",
             lambda c, n: int("".join(reversed(str(n)))), lambda r, c: (r.randint(10, 10 ** 6),),
             edges=lambda c: [(0,), (7,), (1200,)]),
    Template("count_from_set", ("count_chars", "count_members", "how_many"), (("str", TEXT),), "int",
             "returns how many characters of {a} are one of the letters '{chars}'",
             "return sum(1 for ch in {a} if ch in '{chars}')", lambda c, s: len([x for x in s if x in c.chars]),
             lambda r, c: (word(r, letters(r, *c.chars, extra=2), 2, 12),),
             (("chars", tuple("".join(t) for t in itertools.combinations(LETTERS, 3))),),
             lambda c: [("",), (c.chars.upper(),), (c.chars[::-1] * 2,)]),
    Template("long_words", ("long_words", "words_longer_than", "filter_words"), (("str", SENT),), "list[str]",
             "returns the words of {a} (separated by single spaces) that have more than {k} letters, in order",
             "return [w for w in {a}.split() if len(w) > {k}]",
             lambda c, s: [w for w in s.split(" ") if len(w) > c.k], lambda r, c: (sentence(r, 2, 7),),
             (("k", tuple(range(2, 8))),), lambda c: [("",), ("a" * c.k,), ("a" * (c.k + 1),)]),
    Template("limit_repeats", ("limit_repeats", "cap_copies", "keep_few"), (("list[int]", LIST),), "list[int]",
             "returns {a} with each value kept only at its first {k} occurrences (later copies removed), in order",
             "seen = {{}}\nout = []\nfor v in {a}:\n    seen[v] = seen.get(v, 0) + 1\n    if seen[v] <= {k}:\n"
             "        out.append(v)\nreturn out", lambda c, xs: [v for i, v in enumerate(xs) if xs[:i].count(v) < c.k],
             lambda r, c: (ints(r, 0, 5, 4, 12),), (("k", (1, 2, 3, 4)),), lambda c: [([],), ([1] * (c.k + 2),)]),
    Template("running_total", ("running_totals", "prefix_sums", "cumulative"), (("list[int]", LIST),), "list[int]",
             "returns the running totals of {a} starting from {k}: element i of the result is {k} plus the sum "
             "of the first i + 1 elements of {a}",
             "total = {k}\nout = []\nfor v in {a}:\n    total += v\n    out.append(total)\nreturn out",
             lambda c, xs: [c.k + sum(xs[:i + 1]) for i in range(len(xs))], lambda r, c: (ints(r, -10, 20, 2, 7),),
             (("k", tuple(range(21))),), lambda c: [([],), ([0],), ([-c.k, c.k],)]),
    Template("count_rises", ("count_rises", "count_jumps", "rises"), (("list[int]", LIST),), "int",
             "returns how many elements of {a} are at least {k} larger than the element just before them",
             "return sum(1 for i in range(1, len({a})) if {a}[i] - {a}[i - 1] >= {k})",
             lambda c, xs: len([1 for x, y in zip(xs, xs[1:]) if y >= x + c.k]),
             lambda r, c: (ints(r, 0, 4 * c.k, 3, 9),), (("k", tuple(range(1, 7))),),
             lambda c: [([],), ([5],), ([0, c.k],), ([c.k, 0],), ([0, c.k - 1],)]),
    Template("stride_sum", ("sum_every_kth", "stride_sum", "sum_steps"), (("list[int]", LIST),), "int",
             "returns the sum of the elements of {a} at positions {start}, {start} + {k}, {start} + 2 * {k}, "
             "and so on (positions count from 0)", "return sum({a}[{start}::{k}])",
             lambda c, xs: sum(v for i, v in enumerate(xs) if i >= c.start and (i - c.start) % c.k == 0),
             lambda r, c: (ints(r, -9, 20, 2, 10),), (("k", (2, 3, 4, 5)), ("start", (0, 1, 2, 3, 4))),
             lambda c: [([],), ([1],)], lambda c: c.start < c.k),
)

LEVEL_3 = (
    Template("fizz_words", ("fizz_buzz", "label_numbers", "say_numbers"), (("int", INT),), "list[str]",
             "returns one string for each number i from 1 to {a}: '{w1}{w2}' when i is divisible by both {p} "
             "and {q}, '{w1}' when only by {p}, '{w2}' when only by {q}, otherwise str(i)",
             "out = []\nfor i in range(1, {a} + 1):\n    if i % {p} == 0 and i % {q} == 0:\n"
             "        out.append('{w1}{w2}')\n    elif i % {p} == 0:\n        out.append('{w1}')\n"
             "    elif i % {q} == 0:\n        out.append('{w2}')\n    else:\n        out.append(str(i))\nreturn out",
             _fizz, lambda r, c: (r.randint(1, 20),),
             (("p", (2, 3, 4, 5, 6)), ("q", (3, 4, 5, 6, 7)), ("w1", WORDS), ("w2", WORDS)),
             lambda c: [(0,), (c.p * c.q,)], lambda c: (c.p, c.q) in _PAIRS and c.w1 != c.w2),
    Template("repeat_digit_sum", ("shrink", "digit_root", "reduce_number"), (("int", INT),), "int",
             "replaces the non-negative integer {a} by the sum of its digits for as long as it is at least {k}, "
             "and returns the result", "while {a} >= {k}:\n    {a} = sum(int(d) for d in str({a}))\nreturn {a}",
             _repeat_sum,
             lambda r, c: (r.randint(0, 10 ** r.randint(2, 7)),), (("k", tuple(range(10, 31))),),
             lambda c: [(0,), (c.k - 1,), (c.k,), (10 ** 5 - 1,)]),
    Template("sum_multiples_below", ("sum_of_multiples", "multiples_total", "add_multiples"), (("int", INT),), "int",
             "returns the sum of the numbers from 1 up to but not including {a} that are divisible by {p} or by {q}",
             "return sum(i for i in range(1, {a}) if i % {p} == 0 or i % {q} == 0)",
             lambda c, n: sum(set(range(c.p, max(n, 0), c.p)) | set(range(c.q, max(n, 0), c.q))),
             lambda r, c: (r.randint(1, 100),), (("p", tuple(range(2, 10))), ("q", tuple(range(2, 10)))),
             lambda c: [(0,), (1,), (c.p,), (c.q + 1,)], lambda c: c.p < c.q),
    Template("run_length", ("run_length", "encode_runs", "compress"), (("str", TEXT),), "str",
             "returns the run-length encoding of {a}: each run of one repeated character written as {order[0]}, "
             "runs joined by '{sep}'",
             "runs = []\nfor ch in {a}:\n    if runs and runs[-1][0] == ch:\n        runs[-1][1] += 1\n    else:\n"
             "        runs.append([ch, 1])\nreturn '{sep}'.join({order[1]} for ch, count in runs)",
             lambda c, s: _rle(s, c.order[1].startswith("ch"), c.sep), lambda r, c: (runs(r, "abc", 5),),
             (("order", (("the character then its count", "ch + str(count)"),
                         ("the count then the character", "str(count) + ch"))), ("sep", ("", "-", ",", " "))),
             lambda c: [("",), ("x",), ("y" * 12,)]),
    Template("caesar", ("shift_letters", "caesar", "rotate_letters"), (("str", SENT),), "str",
             "returns {a} with every lowercase letter moved {k} places forward in the alphabet (wrapping from 'z' "
             "to 'a'); every other character stays as it is",
             "out = ''\nfor ch in {a}:\n    if 'a' <= ch <= 'z':\n"
             "        out += chr((ord(ch) - ord('a') + {k}) % 26 + ord('a'))\n    else:\n        out += ch\nreturn out",
             lambda c, s: _caesar(s, c.k), lambda r, c: (sentence(r, 1, 4),), (("k", tuple(range(1, 26))),),
             lambda c: [("",), ("zZ",), ("Hi, you!",)]),
    Template("kth_largest", ("kth_largest", "nth_biggest", "rank_value"), (("list[int]", LIST),), "int",
             "returns the {k[1]} largest distinct value in {a}, or {default} when {a} has fewer than {k[0]} "
             "distinct values",
             "distinct = sorted(set({a}), reverse=True)\nif len(distinct) < {k[0]}:\n    return {default}\n"
             "return distinct[{k[0]} - 1]",
             lambda c, xs: sorted(set(xs))[-c.k[0]] if len(set(xs)) >= c.k[0] else c.default,
             lambda r, c: (ints(r, 1, 30, 2, 8),), (("k", ((2, "second"), (3, "third"))), ("default", (-1, 0))),
             lambda c: [([],), ([5, 5, 5],), ([4, 4, 3, 2],)]),
    Template("longest_streak", ("longest_streak", "longest_stretch", "max_run"), (("list[int]", LIST),), "int",
             "returns the length of the longest stretch of consecutive elements of {a} that are all {cmp[0]} {k}",
             "best = current = 0\nfor v in {a}:\n    current = current + 1 if v {cmp[1]} {k} else 0\n"
             "    best = max(best, current)\nreturn best",
             lambda c, xs: _streak(xs, lambda v: _CMP[c.cmp[1]](v, c.k)),
             lambda r, c: (ints(r, c.k - 3, c.k + 3, 4, 12),),
             (("cmp", (("greater than", ">"), ("less than", "<"), ("equal to", "=="))), ("k", tuple(range(21)))),
             lambda c: [([],), ([c.k],), ([c.k + 1, c.k - 1],)]),
    Template("digit_sum_divisible", ("count_numbers", "count_digit_sums", "digit_sum_hits"), (("int", INT),), "int",
             "returns how many of the numbers from 1 to {a} inclusive have a digit sum divisible by {k}",
             "return sum(1 for i in range(1, {a} + 1) if sum(int(d) for d in str(i)) % {k} == 0)",
             lambda c, n: len([i for i in range(1, n + 1) if sum(map(int, str(i))) % c.k == 0]),
             lambda r, c: (r.randint(1, 300),), (("k", tuple(range(2, 10))),), lambda c: [(0,), (1,), (c.k,)]),
    Template("pair_sums", ("count_pairs", "pairs_with_sum", "two_sum_count"), (("list[int]", LIST),), "int",
             "returns the number of pairs of positions i < j whose elements in {a} add up to {k}",
             "count = 0\nfor i in range(len({a})):\n    for j in range(i + 1, len({a})):\n"
             "        if {a}[i] + {a}[j] == {k}:\n            count += 1\nreturn count",
             lambda c, xs: len([1 for x, y in itertools.combinations(xs, 2) if x + y == c.k]),
             lambda r, c: (ints(r, min(c.k, 0) - 3, max(c.k, 0) + 3, 3, 9),), (("k", tuple(range(-5, 26))),),
             lambda c: [([],), ([c.k],), ([c.k, 0, 0],)]),
    Template("capitalise_long", ("capitalise_long", "title_long_words", "shout_long"), (("str", SENT),), "str",
             "returns {a} (words separated by single spaces) with the first letter of every word of at least {k} "
             "letters made uppercase",
             "return ' '.join(w[0].upper() + w[1:] if len(w) >= {k} else w for w in {a}.split(' '))",
             lambda c, s: " ".join(w.capitalize() if len(w) >= c.k else w for w in s.split(" ")),
             lambda r, c: (sentence(r, 2, 6),), (("k", (1, 2, 3, 4, 5)),), lambda c: [("",), ("a" * c.k,)]),
)


LEVEL_4 = (
    Template("primes", ("primes_below", "prime_stat", "count_primes"), (("int", INT),), "int",
             "returns {what[0]} {a}",
             "total = 0\nfor i in range(2, {a}{what[2]}):\n    if all(i % d for d in range(2, int(i ** 0.5) + 1)):\n"
             "        total += {what[1]}\nreturn total",
             lambda c, n: (len if c.what[1] == "1" else sum)([i for i in range(n + bool(c.what[2])) if _prime(i)]),
             lambda r, c: (r.randint(0, 100),),
             (("what", (("how many primes are less than", "1", ""),
                        ("the sum of the primes less than", "i", ""),
                        ("how many primes are at most", "1", " + 1"),
                        ("the sum of the primes at most", "i", " + 1"))),),
             lambda c: [(0,), (2,), (3,), (97,)]),
    Template("bracket_depth", ("max_depth", "nesting_depth", "bracket_depth"), (("str", TEXT),), "int",
             "returns the deepest nesting of '{pair[0]}' '{pair[1]}' brackets in {a} (other characters are "
             "ignored), or -1 when those brackets are not balanced",
             "depth = best = 0\nfor ch in {a}:\n    if ch == '{pair[0]}':\n        depth += 1\n"
             "        best = max(best, depth)\n    elif ch == '{pair[1]}':\n        depth -= 1\n"
             "        if depth < 0:\n            return -1\nreturn best if depth == 0 else -1",
             _depth, lambda r, c: (brackets(r, c.pair),), (("pair", ("()", "[]", "<>", "{}")),),
             lambda c: [("",), (c.pair[::-1],), ("x",), (c.pair[0] * 3 + c.pair[1] * 3,)]),
    Template("rotate", ("rotate", "rotate_list", "shift_items"), (("list[int]", LIST),), "list[int]",
             "returns {a} rotated {side[0]} by {k} (rotating by the length of the list changes nothing)",
             "items = list({a})\nif not items:\n    return []\nshift = {k} % len(items)\nreturn {side[1]}",
             lambda c, xs: [xs[(i + (c.k if c.side[0] == "left" else -c.k)) % len(xs)] for i in range(len(xs))],
             lambda r, c: (ints(r, 0, 9, 2, 8),),
             (("k", tuple(range(1, 10))), ("side", (("left", "items[shift:] + items[:shift]"),
                                                    ("right", "items[-shift:] + items[:-shift]")))),
             lambda c: [([],), ([1],), (list(range(c.k)),)]),
    Template("chunk_sums", ("chunk_sums", "group_totals", "block_sums"), (("list[int]", LIST),), "list[int]",
             "returns the sums of consecutive groups of {k} elements of {a}, from the start (the last group may be "
             "shorter)", "return [sum({a}[i:i + {k}]) for i in range(0, len({a}), {k})]",
             lambda c, xs: [sum(v for j, v in enumerate(xs) if j // c.k == g) for g in range(-(-len(xs) // c.k))],
             lambda r, c: (ints(r, -5, 20, 1, 11),), (("k", (2, 3, 4, 5)),), lambda c: [([],), ([7] * c.k,)]),
    Template("to_base", ("to_base", "in_base", "convert_base"), (("int", INT),), "str",
             "returns the non-negative integer {a} written in base {base} as a string of digits, without leading zeros "
             "('0' for zero)",
             "if {a} == 0:\n    return '0'\ndigits = ''\nwhile {a} > 0:\n    digits = str({a} % {base}) + digits\n"
             "    {a} //= {base}\nreturn digits", lambda c, n: _base(n, c.base), lambda r, c: (r.randint(1, 5000),),
             (("base", tuple(range(2, 10))),), lambda c: [(0,), (c.base,), (c.base - 1,)]),
    Template("char_by_count", ("pick_char", "char_by_frequency", "frequency_pick"), (("str", TEXT),), "str",
             "returns the {which[0]} frequent character of {a}, the one {tie[0]} among ties ('' for an empty string)",
             "if not {a}:\n    return ''\ncounts = {{}}\nfor ch in {a}:\n    counts[ch] = counts.get(ch, 0) + 1\n"
             "target = {which[1]}(counts.values())\nreturn {tie[1]}(ch for ch in counts if counts[ch] == target)",
             _pick, lambda r, c: (word(r, letters(r, extra=4), 3, 12),),
             (("which", (("most", "max"), ("least", "min"))),
              ("tie", (("first in the alphabet", "min"), ("last in the alphabet", "max")))),
             lambda c: [("",), ("z",), ("abab",)]),
    Template("interleave", ("interleave", "alternate", "zip_lists"),
             (("list[int]", ("first", "left", "a")), ("list[int]", ("second", "right", "b"))), "list[int]",
             "returns the elements of {a} and {b} taken alternately, starting with {a}; once one list runs out, "
             "the rest of the other follows",
             "out = []\nfor i in range(max(len({a}), len({b}))):\n    if i < len({a}):\n        out.append({a}[i])\n"
             "    if i < len({b}):\n        out.append({b}[i])\nreturn out",
             lambda c, xs, ys: [v for pair in itertools.zip_longest(xs, ys) for v in pair if v is not None],
             lambda r, c: (ints(r, 0, 9, 0, 5), ints(r, 10, 99, 0, 5)), (),
             lambda c: [([], []), ([1], []), ([], [2, 3])]),
    Template("distinct_substrings", ("count_substrings", "distinct_windows", "unique_pieces"),
             (("str", TEXT),), "int", "returns the number of distinct substrings of length {k} in {a}",
             "return len(set({a}[i:i + {k}] for i in range(len({a}) - {k} + 1)))",
             lambda c, s: len({s[i:i + c.k] for i in range(max(0, len(s) - c.k + 1))}),
             lambda r, c: (word(r, "ab" if c.k > 2 else "abc", 2, 10),), (("k", (2, 3, 4)),),
             lambda c: [("",), ("a" * c.k,), ("a" * (c.k - 1),)]),
    Template("sort_words", ("sort_words", "order_words", "arrange_words"), (("str", SENT),), "str",
             "returns the words of {a} (separated by single spaces) sorted by length, {key[0]}, ties in "
             "alphabetical order, joined by '{sep}'",
             "return '{sep}'.join(sorted({a}.split(), key=lambda w: {key[1]}))",
             lambda c, s: c.sep.join(sorted(sorted(s.split()), key=len, reverse=c.key[0].startswith("long"))),
             lambda r, c: (sentence(r, 2, 6),),
             (("key", (("shortest first", "(len(w), w)"), ("longest first", "(-len(w), w)"))),
              ("sep", (" ", ",", "-"))),
             lambda c: [("",), ("b a",), ("bb a cc",)]),
)

LEVELS = {1: LEVEL_1, 2: LEVEL_2, 3: LEVEL_3, 4: LEVEL_4}
