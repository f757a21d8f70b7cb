"""fmt's formatting of float64: %e %f %g (shortest or rounded digits) and %x/%X hexadecimal floats."""

from __future__ import annotations

import math
from decimal import Decimal


def _shortest_digits(x: float) -> tuple[str, int]:
    """The shortest decimal digits that read back as x (x > 0), and the decimal point position."""
    sign, digits, exp = Decimal(repr(x)).as_tuple()
    ds = "".join(str(d) for d in digits).rstrip("0")
    if not ds:
        return "", 0
    assert isinstance(exp, int)
    return ds, len(digits) + exp


def _rounded_digits(x: float, sig: int) -> tuple[str, int]:
    """x (>= 0) rounded to sig significant digits, trailing zeros dropped, and the decimal point position."""
    if x == 0:
        return "", 0
    mant, _, exp = f"{x:.{sig - 1}e}".partition("e")
    ds = mant.replace(".", "").rstrip("0")
    return ds, int(exp) + 1


def _fmt_e(digits: str, dp: int, prec: int, ch: str) -> str:
    out = digits[:1] or "0"
    if prec > 0:
        out += "." + digits[1 : 1 + prec].ljust(prec, "0")
    exp = 0 if not digits else dp - 1
    sign = "-" if exp < 0 else "+"
    return f"{out}{ch}{sign}{abs(exp):02d}"


def _fmt_f(digits: str, dp: int, prec: int) -> str:
    if dp > 0:
        out = digits[:dp].ljust(dp, "0")
    else:
        out = "0"
    if prec > 0:
        frac = "".join(digits[dp + i] if 0 <= dp + i < len(digits) else "0" for i in range(prec))
        out += "." + frac
    return out


def _format_float(v: float, verb: str, prec: int) -> str:
    """strconv.FormatFloat(v, verb, prec, 64) for verbs e E f g G x X."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    neg = math.copysign(1.0, v) < 0
    x = abs(v)
    sign = "-" if neg else ""
    if verb in "xX":
        return sign + _format_hex_float(x, prec, verb)
    if verb == "b":
        # Binary exponent form: the 53-bit mantissa as an integer, then p and the power of two.
        if x == 0:
            return sign + "0p-1074"
        m, e = math.frexp(x)
        mant, exp = int(m * (1 << 53)), e - 53
        if exp < -1074:
            mant, exp = mant >> (-1074 - exp), -1074
        return f"{sign}{mant}p{'-' if exp < 0 else '+'}{abs(exp)}"
    shortest = prec < 0
    if verb in "eE":
        if shortest:
            digits, dp = _shortest_digits(x) if x else ("", 0)
            return sign + _fmt_e(digits, dp, max(len(digits) - 1, 0), verb)
        return sign + f"{x:.{prec}e}".replace("e", verb)
    if verb == "f":
        if shortest:
            digits, dp = _shortest_digits(x) if x else ("", 0)
            return sign + _fmt_f(digits, dp, max(len(digits) - dp, 0))
        return sign + f"{x:.{prec}f}"
    # g / G
    if shortest:
        digits, dp = _shortest_digits(x) if x else ("", 0)
        prec = len(digits)
        eprec = 6
    else:
        if prec == 0:
            prec = 1
        digits, dp = _rounded_digits(x, prec)
        eprec = prec
        if eprec > len(digits) and len(digits) >= dp:
            eprec = len(digits)
    exp = dp - 1
    if exp < -4 or exp >= eprec:
        if prec > len(digits):
            prec = len(digits)
        return sign + _fmt_e(digits, dp, prec - 1, "e" if verb == "g" else "E")
    if prec > dp:
        prec = len(digits)
    return sign + _fmt_f(digits, dp, max(prec - dp, 0))


def _format_hex_float(x: float, prec: int, verb: str) -> str:
    if x == 0:
        mant, exp = "0", 0
    else:
        m, e = math.frexp(x)  # x = m * 2**e with 0.5 <= m < 1
        mant_int = int(m * (1 << 53))  # 53 significant bits, leading bit set
        exp = e - 1
        frac = mant_int - (1 << 52)
        hexfrac = f"{frac:013x}"
        if prec >= 0:
            if prec < 13:
                shift = (13 - prec) * 4
                value = (1 << 52) + frac
                q, r = divmod(value, 1 << shift)
                half = 1 << (shift - 1)
                if r > half or (r == half and q & 1):
                    q += 1
                lead = q >> (prec * 4)
                if lead >= 2:
                    q >>= 1
                    exp += 1
                    lead = q >> (prec * 4)
                hexfrac = f"{q & ((1 << (prec * 4)) - 1):0{prec}x}" if prec else ""
            else:
                hexfrac = hexfrac.ljust(prec, "0")
            mant = "1" + ("." + hexfrac if hexfrac else "")
        else:
            hexfrac = hexfrac.rstrip("0")
            mant = "1" + ("." + hexfrac if hexfrac else "")
    if x == 0 and prec > 0:
        mant = "0." + "0" * prec
    out = f"0x{mant}p{'-' if exp < 0 else '+'}{abs(exp):02d}"
    return out.upper() if verb == "X" else out
