"""Units after a final answer's value: a closed table of units with their dimensions and scales.

`12 \\text{ cm}^2`, `12 cm²`, `30^\\circ`, `\\$18`, `€18`, `120 cubic units`, `12 apples` end in a unit;
`12 \\text{ thousand}`, `12 \\text{ (not sure)}`, `12 \\text{ radians?}` end in prose, which is no answer.
What counts as a unit:
- a name of the table below (with its plural and spelled-out forms), an exponent kept (`cm^2` is an area);
- currency and degree signs, which are units like any other (a euro answer is not a dollar gold's);
- in plain text only (never in `\\text`), a plural count noun of four letters or more (`12 apples`) that
  is no negation, hedge or scale word.
Two units are the same when their dimension and scale are; a value in one unit equals a value in
another of the same dimension when value x scale does (`1.2 km` is `1200 m`); `12 m` and `12 km` differ.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

# dimension, scale in the dimension's base unit, names (the first is the canonical one)
_TABLE = [
    ("length", Fraction(1, 1000), "mm millimeter millimeters millimetre millimetres"),
    ("length", Fraction(1, 100), "cm centimeter centimeters centimetre centimetres"),
    ("length", Fraction(1), "m meter meters metre metres"),
    ("length", Fraction(1000), "km kilometer kilometers kilometre kilometres"),
    ("length", Fraction(254, 10000), "in inch inches"),
    ("length", Fraction(3048, 10000), "ft foot feet"),
    ("length", Fraction(9144, 10000), "yd yard yards"),
    ("length", Fraction(1609344, 1000), "mi mile miles"),
    ("length^2", Fraction(1), "square units, sq units, units^2, unit^2"),
    ("length^3", Fraction(1), "cubic units, cu units, units^3, unit^3"),
    ("count", Fraction(1), "units unit"),
    ("time", Fraction(1), "s sec secs second seconds"),
    ("time", Fraction(60), "min mins minute minutes"),
    ("time", Fraction(3600), "h hr hrs hour hours"),
    ("time", Fraction(86400), "day days"),
    ("time", Fraction(604800), "week weeks"),
    ("month", Fraction(1), "month months"),
    ("month", Fraction(12), "year years yr yrs"),
    ("mass", Fraction(1, 1000), "mg milligram milligrams"),
    ("mass", Fraction(1), "g gram grams"),
    ("mass", Fraction(1000), "kg kilogram kilograms"),
    ("mass", Fraction(45359237, 100000), "lb lbs pound pounds"),
    ("mass", Fraction(45359237, 1600000), "oz ounce ounces"),
    ("volume", Fraction(1, 1000), "ml milliliter milliliters millilitre millilitres"),
    ("volume", Fraction(1), "l liter liters litre litres"),
    ("volume", Fraction(3785411784, 1000000000), "gal gallon gallons"),
    ("speed", Fraction(1000, 3600), "km/h kmh kph"),
    ("speed", Fraction(1), "m/s"),
    ("speed", Fraction(1609344, 3600000), "mph"),
    ("usd", Fraction(1), "$ \\$ dollar dollars usd"),
    ("usd", Fraction(1, 100), "cent cents ¢"),
    ("eur", Fraction(1), "€ euro euros eur"),
    ("gbp", Fraction(1), "£ gbp"),
    ("jpy", Fraction(1), "¥ yen"),
    ("cny", Fraction(1), "yuan rmb"),
    ("inr", Fraction(1), "₹ rupee rupees"),
    ("angle", Fraction(1), "degree degrees deg ° \\circ \\degree"),
    ("radian", Fraction(1), "rad radian radians"),
]
_NAMES: dict[str, tuple[str, str, Fraction]] = {}   # name -> (canonical, dimension, scale)
for _dim, _scale, _names in _TABLE:
    _all = _names.split(",") if "," in _names else _names.split()
    for _n in _all:
        _NAMES.setdefault(_n.strip(), (_all[0].strip(), _dim, _scale))
_POWER_WORDS = {"square": 2, "sq": 2, "squared": 2, "cubic": 3, "cu": 3, "cubed": 3}
SCALE_WORDS = frozenset("thousand thousands million millions billion billions trillion trillions hundred hundreds "
                        "dozen dozens percent tens".split())
# Never a unit nor a count noun: the scale words and what hedges, negates or continues a sentence.
_NOT_NOUNS = SCALE_WORDS | frozenset(
    "is are was were be the and or not nor none never maybe perhaps possibly probably wrong "
    "incorrect false either neither unless except approx approximately about around roughly nearly almost "
    "guess doubt unsure times plus minus less more than yes no thus this his its has was does as us whereas "
    "plus always sometimes perhaps besides".split())
_COUNT_NOUN = re.compile(r"[a-z]{3,}s")
_EXPONENT = re.compile(r"\s*(?:\^\s*\{?\s*([23])\s*\}?|(²)|(³))\s*$")


@dataclass(frozen=True)
class Unit:
    name: str        # canonical, with its power: "cm^2", "square units", "apples"
    dimension: str   # "length^2", "usd", "count:apples"
    scale: Fraction  # in the dimension's base unit


def _with_power(name: str, power: int) -> Unit | None:
    canon, dim, scale = _NAMES[name]
    if power == 1:
        return Unit(canon, dim, scale)
    if canon == "units":   # `units^2`, `cubic units`
        return _with_power(("square units", "cubic units")[power - 2], 1)
    if dim != "length":   # cm^2 and ft^3; not hr^2
        return None
    return Unit(f"{canon}^{power}", f"length^{power}", scale ** power)


def read_unit(text: str, prose: bool) -> Unit | None:
    """The unit that `text` (what followed the value: a `\\text{...}` content, or plain words when
    `prose`) names, or None when it names none. An exponent after it is kept."""
    s = " ".join(text.strip().lower().replace("\\,", " ").replace("~", " ").split()).removesuffix(".")
    if s in _NAMES:
        return _with_power(s, 1)
    power = 1
    if m := _EXPONENT.search(s):
        power, s = (int(m.group(1)) if m.group(1) else 2 if m.group(2) else 3), s[:m.start()].strip()
    words = s.split()
    if len(words) == 2 and words[0] in _POWER_WORDS and power == 1 and words[1] in _NAMES:
        return _with_power(words[1], _POWER_WORDS[words[0]])       # `square feet`, `cubic cm`
    if len(words) == 2 and words[1] in ("squared", "cubed") and power == 1 and words[0] in _NAMES:
        return _with_power(words[0], _POWER_WORDS[words[1]])       # `inches squared`
    if s in _NAMES:
        return _with_power(s, power)
    if prose and power == 1 and _COUNT_NOUN.fullmatch(s) and s not in _NOT_NOUNS:
        return Unit(s, "count:" + s, Fraction(1))                   # `12 apples`
    return None


def sign_unit(symbol: str) -> Unit:
    """A currency or degree sign as its unit."""
    return _with_power(symbol, 1)


def same_quantity(a_value: Fraction, a_unit: Unit, g_value: Fraction, g_unit: Unit) -> bool:
    """Equal values in units of one dimension (`1.2 km` and `1200 m`)."""
    return a_unit.dimension == g_unit.dimension and a_value * a_unit.scale == g_value * g_unit.scale
