"""Go's fmt: Sprint, Sprintln and Sprintf with Go's verbs, flags, %v of values and error forms."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hookrunner.golang.strconv import is_print as _is_print
from hookrunner.golang.strconv import quote as go_quote
from hookrunner.golang.strconv import quote_rune as _quote_rune
from hookrunner.golang.template.fmtfloat import _format_float
from hookrunner.golang.template.literals import _can_backquote
from hookrunner.golang.template.values import _Byte, _go_type, _Iface, _unwrap


@dataclass
class _Flags:
    plus: bool = False
    minus: bool = False
    sharp: bool = False
    space: bool = False
    zero: bool = False
    plus_v: bool = False
    sharp_v: bool = False
    wid: int = 0
    wid_present: bool = False
    prec: int = 0
    prec_present: bool = False


class _Printer:
    """A port of the behaviour of fmt's printer state: one buffer and the flags of the current verb."""

    def __init__(self) -> None:
        self.buf: list[str] = []
        self.f = _Flags()

    # -- padding
    def _padding(self, n: int) -> None:
        if n > 0:
            self.buf.append(("0" if self.f.zero else " ") * n)

    def _pad(self, s: str) -> None:
        f = self.f
        if not f.wid_present or f.wid == 0:
            self.buf.append(s)
            return
        width = f.wid - len(s)
        if not f.minus:
            self._padding(width)
            self.buf.append(s)
        else:
            self.buf.append(s)
            self._padding(width)

    # -- per-kind formatting
    def _fmt_integer(self, u: int, base: int, verb: str, upper: bool = False) -> None:
        f = self.f
        negative = u < 0
        if negative:
            u = -u
        prec = 0
        if f.prec_present:
            prec = f.prec
            if prec == 0 and u == 0:
                old = f.zero
                f.zero = False
                self._padding(f.wid)
                f.zero = old
                return
        elif f.zero and f.wid_present:
            prec = f.wid
            if negative or f.plus or f.space:
                prec -= 1
        if base == 10:
            s = str(u)
        elif base == 16:
            s = f"{u:X}" if upper else f"{u:x}"
        elif base == 8:
            s = f"{u:o}"
        else:
            s = f"{u:b}"
        if prec > len(s):
            s = "0" * (prec - len(s)) + s
        if f.sharp:
            if base == 2:
                s = "0b" + s
            elif base == 8:
                if s[0] != "0":
                    s = "0" + s
            elif base == 16:
                s = ("0X" if upper else "0x") + s
        if verb == "O":
            s = "0o" + s
        if negative:
            s = "-" + s
        elif f.plus:
            s = "+" + s
        elif f.space:
            s = " " + s
        old = f.zero
        f.zero = False
        self._pad(s)
        f.zero = old

    def _fmt_unicode(self, u: int) -> None:
        f = self.f
        prec = 4
        if f.prec_present and f.prec > 4:
            prec = f.prec
        s = "U+" + f"{u:X}".rjust(prec, "0")
        if f.sharp and u <= 0x10FFFF and not (0xD800 <= u <= 0xDFFF) and _is_print(chr(u)):
            s += " '" + chr(u) + "'"
        old = f.zero
        f.zero = False
        self._pad(s)
        f.zero = old

    def _fmt_c(self, u: int) -> None:
        if u > 0x10FFFF or 0xD800 <= u <= 0xDFFF:
            u = 0xFFFD
        self._pad(chr(u))

    def _fmt_qc(self, u: int) -> None:
        self._pad(_quote_rune(u, self.f.plus))

    def _truncate(self, s: str) -> str:
        if self.f.prec_present:
            return s[: self.f.prec]
        return s

    def _fmt_s(self, s: str) -> None:
        self._pad(self._truncate(s))

    def _fmt_sx(self, s: str, upper: bool) -> None:
        f = self.f
        b = s.encode("utf-8", "surrogateescape")
        length = len(b)
        if f.prec_present and f.prec < length:
            length = f.prec
        width = 2 * length
        if width > 0:
            if f.space:
                if f.sharp:
                    width *= 2
                width += length - 1
            elif f.sharp:
                width += 2
        else:
            if f.wid_present:
                self._padding(f.wid)
            return
        if f.wid_present and f.wid > width and not f.minus:
            self._padding(f.wid - width)
        prefix = "0X" if upper else "0x"
        out: list[str] = []
        if f.sharp:
            out.append(prefix)
        for i in range(length):
            if f.space and i > 0:
                out.append(" ")
                if f.sharp:
                    out.append(prefix)
            out.append(f"{b[i]:02X}" if upper else f"{b[i]:02x}")
        self.buf.append("".join(out))
        if f.wid_present and f.wid > width and f.minus:
            self._padding(f.wid - width)

    def _fmt_q(self, s: str) -> None:
        s = self._truncate(s)
        if self.f.sharp and _can_backquote(s):
            self._pad("`" + s + "`")
            return
        self._pad(go_quote(s, self.f.plus))

    def _fmt_float(self, v: float, verb: str, prec: int) -> None:
        f = self.f
        if f.prec_present:
            prec = f.prec
        num = _format_float(v, verb, prec)
        if num[0] in "+-":
            pass
        else:
            num = "+" + num
        if f.space and num[0] == "+" and not f.plus:
            num = " " + num[1:]
        if num[1] in "IN":
            old = f.zero
            f.zero = False
            if num[1] == "N" and not f.space and not f.plus:
                num = num[1:]
            self._pad(num)
            f.zero = old
            return
        if f.sharp and verb != "b":
            digits = 0
            if verb in "vgGx":
                digits = prec if prec != -1 else 6
            tail = ""
            body = num[1:]
            has_point = False
            saw_nonzero = False
            kept: list[str] = []
            for i, ch in enumerate(body):
                if ch == ".":
                    has_point = True
                elif ch in "pP" or (ch in "eE" and verb not in "xX"):
                    tail = body[i:]
                    break
                else:
                    if ch != "0":
                        saw_nonzero = True
                    if saw_nonzero:
                        digits -= 1
                kept.append(ch)
            body = "".join(kept)
            if not has_point:
                if body == "0":
                    digits -= 1
                body += "."
            if digits > 0:
                body += "0" * digits
            num = num[0] + body + tail
        if f.plus or num[0] != "+":
            if f.zero and f.wid_present and f.wid > len(num):
                self.buf.append(num[0])
                self._padding(f.wid - len(num))
                self.buf.append(num[1:])
                return
            self._pad(num)
            return
        self._pad(num[1:])

    # -- dispatch
    def bad_verb(self, verb: str, arg: Any) -> None:
        self.buf.append("%!" + verb + "(")
        if arg is not None:
            self.buf.append(_go_type(arg) + "=")
            self.print_arg(arg, "v")
        else:
            self.buf.append("<nil>")
        self.buf.append(")")

    def print_arg(self, arg: Any, verb: str) -> None:
        arg = _unwrap(arg)
        if arg is None:
            if verb in "Tv":
                self._pad("<nil>")
            else:
                self.bad_verb(verb, None)
            return
        if verb == "T":
            self._fmt_s(_go_type(arg))
            return
        self._print_value(arg, verb, 0)

    def _print_value(self, v: Any, verb: str, depth: int) -> None:
        f = self.f
        t = type(v)
        if t is _Iface:
            inner = v.value
            if inner is None:
                self.buf.append("interface {}(nil)" if f.sharp_v else "<nil>")
                return
            self._print_value(inner, verb, depth + 1)
            return
        if t is bool:
            if verb in "tv":
                self._pad("true" if v else "false")
            else:
                self.bad_verb(verb, v)
        elif t is int or t is _Byte:
            self._print_int(v, verb, t is int)
        elif t is float:
            self._print_float(v, verb)
        elif t is complex:
            if verb in "vbgGxXfFeE":
                old_plus = f.plus
                self.buf.append("(")
                self._print_float(v.real, verb)
                f.plus = True
                self._print_float(v.imag, verb)
                self.buf.append("i)")
                f.plus = old_plus
            else:
                self.bad_verb(verb, v)
        elif t is str:
            if verb == "v":
                self._fmt_q(v) if f.sharp_v else self._fmt_s(v)
            elif verb == "s":
                self._fmt_s(v)
            elif verb in "xX":
                self._fmt_sx(v, verb == "X")
            elif verb == "q":
                self._fmt_q(v)
            else:
                self.bad_verb(verb, v)
        elif t is dict:
            if f.sharp_v:
                self.buf.append("map[string]interface {}{")
            else:
                self.buf.append("map[")
            for i, key in enumerate(sorted(v)):
                if i > 0:
                    self.buf.append(", " if f.sharp_v else " ")
                self._print_value(key, verb, depth + 1)
                self.buf.append(":")
                self._print_value(_Iface(v[key]), verb, depth + 1)
            self.buf.append("}" if f.sharp_v else "]")
        elif t is list:
            if f.sharp_v:
                self.buf.append("[]interface {}{")
                for i, e in enumerate(v):
                    if i > 0:
                        self.buf.append(", ")
                    self._print_value(_Iface(e), verb, depth + 1)
                self.buf.append("}")
            else:
                self.buf.append("[")
                for i, e in enumerate(v):
                    if i > 0:
                        self.buf.append(" ")
                    self._print_value(_Iface(e), verb, depth + 1)
                self.buf.append("]")
        else:
            self.buf.append("?")

    def _print_int(self, v: int, verb: str, signed: bool) -> None:
        if verb == "v":
            if self.f.sharp_v and not signed:
                old = self.f.sharp
                self.f.sharp = True
                self._fmt_integer(int(v), 16, "v")
                self.f.sharp = old
            else:
                self._fmt_integer(int(v), 10, verb)
        elif verb == "d":
            self._fmt_integer(int(v), 10, verb)
        elif verb == "b":
            self._fmt_integer(int(v), 2, verb)
        elif verb in "oO":
            self._fmt_integer(int(v), 8, verb)
        elif verb == "x":
            self._fmt_integer(int(v), 16, verb)
        elif verb == "X":
            self._fmt_integer(int(v), 16, verb, upper=True)
        elif verb == "c":
            self._fmt_c(int(v) if v >= 0 else int(v) + 2**64)
        elif verb == "q":
            self._fmt_qc(int(v) if v >= 0 else int(v) + 2**64)
        elif verb == "U":
            self._fmt_unicode(int(v) if v >= 0 else int(v) + 2**64)
        else:
            self.bad_verb(verb, v)

    def _print_float(self, v: float, verb: str) -> None:
        if verb == "v":
            self._fmt_float(v, "g", -1)
        elif verb in "bgGxX":
            self._fmt_float(v, verb, -1)
        elif verb in "feE":
            self._fmt_float(v, verb, 6)
        elif verb == "F":
            self._fmt_float(v, "f", 6)
        else:
            self.bad_verb(verb, v)

    # -- entry points
    def do_print(self, args: list[Any]) -> None:
        prev_string = False
        for i, arg in enumerate(args):
            arg = _unwrap(arg)
            is_string = type(arg) is str
            if i > 0 and not is_string and not prev_string:
                self.buf.append(" ")
            self.f = _Flags()
            self.print_arg(arg, "v")
            prev_string = is_string

    def do_println(self, args: list[Any]) -> None:
        for i, arg in enumerate(args):
            if i > 0:
                self.buf.append(" ")
            self.f = _Flags()
            self.print_arg(arg, "v")
        self.buf.append("\n")

    def do_printf(self, fmt: str, args: list[Any]) -> None:
        end = len(fmt)
        arg_num = 0
        after_index = False
        reordered = False
        i = 0
        while i < end:
            good_arg_num = True
            j = fmt.find("%", i)
            if j < 0:
                self.buf.append(fmt[i:])
                break
            if j > i:
                self.buf.append(fmt[i:j])
            i = j + 1
            f = self.f = _Flags()
            simple_done = False
            while i < end:
                c = fmt[i]
                if c == "#":
                    f.sharp = True
                elif c == "0":
                    f.zero = not f.minus
                elif c == "+":
                    f.plus = True
                elif c == "-":
                    f.minus = True
                    f.zero = False
                elif c == " ":
                    f.space = True
                else:
                    if "a" <= c <= "z" and arg_num < len(args):
                        if c == "v":
                            f.sharp_v, f.sharp = f.sharp, False
                            f.plus_v, f.plus = f.plus, False
                        self.print_arg(args[arg_num], c)
                        arg_num += 1
                        i += 1
                        simple_done = True
                    break
                i += 1
            if simple_done:
                continue
            # argument index, width, precision
            arg_num, i, after_index, ok, reordered = self._arg_number(arg_num, fmt, i, len(args), reordered)
            good_arg_num = good_arg_num and ok
            if i < end and fmt[i] == "*":
                i += 1
                f.wid, f.wid_present, arg_num = _int_from_arg(args, arg_num)
                if not f.wid_present:
                    self.buf.append("%!(BADWIDTH)")
                if f.wid < 0:
                    f.wid = -f.wid
                    f.minus = True
                    f.zero = False
                after_index = False
            else:
                f.wid, f.wid_present, i = _parse_num(fmt, i, end)
                if after_index and f.wid_present:
                    good_arg_num = False
            if i + 1 < end and fmt[i] == ".":
                i += 1
                if after_index:
                    good_arg_num = False
                arg_num, i, after_index, ok, reordered = self._arg_number(
                    arg_num, fmt, i, len(args), reordered
                )
                good_arg_num = good_arg_num and ok
                if i < end and fmt[i] == "*":
                    i += 1
                    f.prec, f.prec_present, arg_num = _int_from_arg(args, arg_num)
                    if f.prec < 0:
                        f.prec = 0
                        f.prec_present = False
                    if not f.prec_present:
                        self.buf.append("%!(BADPREC)")
                    after_index = False
                else:
                    f.prec, f.prec_present, i = _parse_num(fmt, i, end)
                    if not f.prec_present:
                        f.prec, f.prec_present = 0, True
            if not after_index:
                arg_num, i, after_index, ok, reordered = self._arg_number(
                    arg_num, fmt, i, len(args), reordered
                )
                good_arg_num = good_arg_num and ok
            if i >= end:
                self.buf.append("%!(NOVERB)")
                break
            verb = fmt[i]
            i += 1
            if verb == "%":
                self.buf.append("%")
            elif not good_arg_num:
                self.buf.append("%!" + verb + "(BADINDEX)")
            elif arg_num >= len(args):
                self.buf.append("%!" + verb + "(MISSING)")
            else:
                if verb == "v":
                    f.sharp_v, f.sharp = f.sharp, False
                    f.plus_v, f.plus = f.plus, False
                self.print_arg(args[arg_num], verb)
                arg_num += 1
        if not reordered and arg_num < len(args):
            self.f = _Flags()
            self.buf.append("%!(EXTRA ")
            for k, arg in enumerate(args[arg_num:]):
                if k > 0:
                    self.buf.append(", ")
                arg = _unwrap(arg)
                if arg is None:
                    self.buf.append("<nil>")
                else:
                    self.buf.append(_go_type(arg) + "=")
                    self.print_arg(arg, "v")
            self.buf.append(")")

    def _arg_number(
        self, arg_num: int, fmt: str, i: int, num_args: int, reordered: bool
    ) -> tuple[int, int, bool, bool, bool]:
        """An explicit [n] argument index: (arg_num, i, found, good, reordered)."""
        if i >= len(fmt) or fmt[i] != "[":
            return arg_num, i, False, True, reordered
        index, wid, ok = _parse_arg_number(fmt[i:])
        if ok and 0 <= index < num_args:
            return index, i + wid, True, True, True
        return arg_num, i + wid, ok, False, True


def _parse_num(s: str, start: int, end: int) -> tuple[int, bool, int]:
    if start >= end:
        return 0, False, end
    num = 0
    is_num = False
    i = start
    while i < end and "0" <= s[i] <= "9":
        if num > 1_000_000:  # Go's tooLarge guard
            return 0, False, end
        num = num * 10 + ord(s[i]) - 48
        is_num = True
        i += 1
    return num, is_num, i


def _parse_arg_number(fmt: str) -> tuple[int, int, bool]:
    if len(fmt) < 3:
        return 0, 1, False
    for i in range(1, len(fmt)):
        if fmt[i] == "]":
            width, ok, newi = _parse_num(fmt, 1, i)
            if not ok or newi != i:
                return 0, i + 1, False
            return width - 1, i + 1, True
    return 0, 1, False


def _int_from_arg(args: list[Any], arg_num: int) -> tuple[int, bool, int]:
    if arg_num >= len(args):
        return 0, False, arg_num
    arg = _unwrap(args[arg_num])
    num, is_int = 0, False
    if type(arg) is int or type(arg) is _Byte:
        num, is_int = int(arg), True
    if is_int and not (-1_000_000 <= num <= 1_000_000):
        num, is_int = 0, False
    return num, is_int, arg_num + 1


def go_sprint(*args: Any) -> str:
    """fmt.Sprint."""
    p = _Printer()
    p.do_print(list(args))
    return "".join(p.buf)


def go_sprintln(*args: Any) -> str:
    """fmt.Sprintln."""
    p = _Printer()
    p.do_println(list(args))
    return "".join(p.buf)


def go_sprintf(fmt: str, *args: Any) -> str:
    """fmt.Sprintf."""
    p = _Printer()
    p.do_printf(fmt, list(args))
    return "".join(p.buf)
