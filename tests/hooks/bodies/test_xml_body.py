"""Tests for hookrunner.hooks.bodies.xml: webhook's XML body parser (mxj over Go's encoding/xml).

Every table marked "verified" was sent to the reference (/usr/bin/webhook 2.8.0, Go 1.19.8, mxj v2.7.0) by a
differential script: the reference's entire-payload output and its `error parsing ...` log line were
compared with these parsers' results, and every case agreed. test_bodies_reference.py re-runs a sample
of them against the binary when it is installed.
"""

from __future__ import annotations

import sys

import pytest

from hookrunner.errors import PayloadParseError
from hookrunner.golang.json import go_json_dumps
from hookrunner.hooks.bodies.xml import parse_xml_payload

# --- XML bodies (verified, mxj v2.7.0 shapes and Go's encoding/xml errors) ---

XML_CASES: list[tuple[bytes, str | None, str | None]] = [
    (b"<a><b>x</b></a>", '{"a":{"b":"x"}}', None),
    (b'<a x="1"><b>x</b><b>y</b><c/><d></d></a>', '{"a":{"-x":"1","b":["x","y"],"c":"","d":""}}', None),
    (b'<a x="1">text</a>', '{"a":{"#text":"text","-x":"1"}}', None),
    (b"<a>t1<b>x</b>t2</a>", '{"a":"t1"}', None),
    (b"<r><a><b>1</b></a><a><b>2</b></a></r>", '{"r":{"a":[{"b":"1"},{"b":"2"}]}}', None),
    (b'<?xml version="1.0"?><!-- c --><a k="v"/>', '{"a":{"-k":"v"}}', None),
    (b"<a><![CDATA[<hi>]]></a>", '{"a":"\\u003chi\\u003e"}', None),
    (b"<a>  spaced  </a>", '{"a":"spaced"}', None),
    (b"<a><b/><b/></a>", '{"a":{"b":["",""]}}', None),
    (b'<a><ns:b xmlns:ns="urn:x">v</ns:b></a>', '{"a":{"b":{"#text":"v","-ns":"urn:x"}}}', None),
    (b"<a>&lt;&amp;</a>", '{"a":"\\u003c\\u0026"}', None),
    (b"", None, "EOF"),
    (b"notxml", None, "EOF"),
    (b"<a><b></a>", None, "xml.Decoder.Token() - XML syntax error on line 1: element <b> closed by </a>"),
    (b"<a/><b/>", '{"a":""}', None),
    (b"<a>x</a>junk", '{"a":"x"}', None),
    (b"<a><b>x</b>t2</a>", '{"a":{"#text":"t2","b":"x"}}', None),
    (b"<a>x<!--c-->y</a>", '{"a":"y"}', None),
    (b"<a>x<![CDATA[y]]></a>", '{"a":"y"}', None),
    (b"junk<a>x</a>", '{"a":"x"}', None),
    (
        b'<!DOCTYPE a [<!ENTITY e "zz">]><a>&e;</a>',
        None,
        "xml.Decoder.Token() - XML syntax error on line 1: invalid character entity &e;",
    ),
    (b'<!DOCTYPE a [<!ENTITY e "zz">]><a>q</a>', '{"a":"q"}', None),
    (b'<a b="1" b="2"/>', '{"a":{"-b":"2"}}', None),
    (
        b'<?xml version="1.0" encoding="ISO-8859-1"?><a>x</a>',
        None,
        'xml.Decoder.Token() - xml: encoding "ISO-8859-1" declared but Decoder.CharsetReader is nil',
    ),
    (
        b'<?xml version="1.1"?><a>x</a>',
        None,
        'xml.Decoder.Token() - xml: unsupported version "1.1"; only version 1.0 is supported',
    ),
    (b"<a:b:c>v</a:b:c>", '{"a:b:c":"v"}', None),
    (b'<a xmlns="urn:d" p:q="1">v</a>', '{"a":{"#text":"v","-q":"1","-xmlns":"urn:d"}}', None),
    (
        b"<a>&nbsp;</a>",
        None,
        "xml.Decoder.Token() - XML syntax error on line 1: invalid character entity &nbsp;",
    ),
    (b"</b><a/>", None, "xml.Decoder.Token() - XML syntax error on line 1: unexpected end element </b>"),
    (b"<a>x", None, "xml.Decoder.Token() - XML syntax error on line 1: unexpected EOF"),
    (b"<", None, "xml.Decoder.Token() - XML syntax error on line 1: unexpected EOF"),
    (
        b"<a x=1/>",
        None,
        "xml.Decoder.Token() - XML syntax error on line 1: unquoted or missing attribute value in element",
    ),
    (b"<a><b><c>1</c></b><b>t</b></a>", '{"a":{"b":[{"c":"1"},"t"]}}', None),
    (b"<a>x<b/></a>", '{"a":"x"}', None),
    (b'<a x="1"><b>2</b>t</a>', '{"a":{"#text":"t","-x":"1","b":"2"}}', None),
    (b"<a>&#65;&#x42;</a>", '{"a":"AB"}', None),
    (b'<a y="&lt;&#10;"/>', '{"a":{"-y":"\\u003c\\n"}}', None),
    (b"<a>&#0;</a>", None, "xml.Decoder.Token() - XML syntax error on line 1: illegal character code U+0000"),
    (
        b"<a>&amp</a>",
        None,
        "xml.Decoder.Token() - XML syntax error on line 1: invalid character entity &amp (no semicolon)",
    ),
    (
        b"<a>]]></a>",
        None,
        "xml.Decoder.Token() - XML syntax error on line 1: unescaped ]]> not in CDATA section",
    ),
    (
        b"<a><p:b></q:b></a>",
        None,
        "xml.Decoder.Token() - XML syntax error on line 1: element <b> in space p closed by </b> in space q",
    ),
    (
        b'<a b c="1"/>',
        None,
        "xml.Decoder.Token() - XML syntax error on line 1: attribute name without = in element",
    ),
    (
        b"<a><!- x --></a>",
        None,
        "xml.Decoder.Token() - XML syntax error on line 1: invalid sequence <!- not part of <!--",
    ),
    (b"<a>&#xD800;x</a>", '{"a":"�x"}', None),
    (b"<?xml version='1.0' encoding='utf-8'?><a>ok</a>", '{"a":"ok"}', None),
    (b"<!DOCTYPE a [ <!ELEMENT a (#PCDATA)> <!-- c > --> ]><a>d</a>", '{"a":"d"}', None),
    (
        b"<a></b c>",
        None,
        "xml.Decoder.Token() - XML syntax error on line 1: invalid characters between </b and >",
    ),
    (b"<1a/>", None, "xml.Decoder.Token() - XML syntax error on line 1: invalid XML name: 1a"),
    (b"<a><b>1</b><b><c>2</c></b><b/></a>", '{"a":{"b":["1",{"c":"2"},""]}}', None),
    (b'<a x="1" x:y="2" z:y="3"/>', '{"a":{"-x":"1","-y":"3"}}', None),
    (b"<a>x<b>y</b>z<c/></a>", '{"a":"x"}', None),
    (
        b"<a>\n<b>1</b>\n</c>",
        None,
        "xml.Decoder.Token() - XML syntax error on line 3: element <a> closed by </c>",
    ),
    (
        b"<a>\n\n<b x=1/></a>",
        None,
        "xml.Decoder.Token() - XML syntax error on line 3: unquoted or missing attribute value in element",
    ),
    (b"<a>\r\n  <b>x\r\ny</b>\r\n</a>", '{"a":{"b":"x\\ny"}}', None),
    (b"<a>\n<b>\n  text  \n</b>\n<b>2</b>\n</a>\n", '{"a":{"b":["text","2"]}}', None),
    (
        b"\n\n<a>&bogus;</a>",
        None,
        "xml.Decoder.Token() - XML syntax error on line 3: invalid character entity &bogus;",
    ),
    (b"<a b='x\ny'>\n</a>", '{"a":{"-b":"x\\ny"}}', None),
    # Tokens read in one match each (start and end tags, plain text) between ones read byte by byte: Go's
    # errors and lines, as webhook 2.8.0 logged them for these bodies.
    (
        b'<a>\n<b x="1"\n y="2">\n</b>\n</c>',
        None,
        "xml.Decoder.Token() - XML syntax error on line 5: element <a> closed by </c>",
    ),
    (b'<a>\n<b x="\xff"/></a>', None, "xml.Decoder.Token() - XML syntax error on line 2: invalid UTF-8"),
    (
        b'<a>\n\n<b x="1\x01"/></a>',
        None,
        "xml.Decoder.Token() - XML syntax error on line 3: illegal character code U+0001",
    ),
    (b"<a>\ntext\x01\n</a>", None, "xml.Decoder.Token() - XML syntax error on line 3: illegal character code U+0001"),
    (
        b"<a>\n<b>\n</b >\n<c  x=\"1\"y='2'/>\n<d x=\"1\"></e>",
        None,
        "xml.Decoder.Token() - XML syntax error on line 5: element <d> closed by </e>",
    ),
    (b'<a x="1"x="2"><b/>\n<b x="&lt;"/>\n</a\n>\n<', '{"a":{"-x":"2","b":["",{"-x":"\\u003c"}]}}', None),
    (b"<a>\n<b\n/>\n<b/ >", None, "xml.Decoder.Token() - XML syntax error on line 4: expected /> in element"),
    (
        b"<n:a>\n<n:b></m:b></n:a>",
        None,
        "xml.Decoder.Token() - XML syntax error on line 2: element <b> in space n closed by </b> in space m",
    ),
    (
        b"<a>\n<\xc3\xa9/>\n<b>\r\n</c>",
        None,
        "xml.Decoder.Token() - XML syntax error on line 4: element <b> closed by </c>",
    ),
]


@pytest.mark.parametrize(("body", "payload", "error"), XML_CASES)
def test_parse_xml_payload(body: bytes, payload: str | None, error: str | None) -> None:
    if error is not None:
        with pytest.raises(PayloadParseError) as info:
            parse_xml_payload(body)
        assert str(info.value) == f"error parsing XML payload: {error}"
        return
    assert go_json_dumps(parse_xml_payload(body)) == payload


def test_xml_entities_declared_in_a_doctype_are_never_expanded() -> None:
    laughs = b'<!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]><l>&b;</l>'
    with pytest.raises(PayloadParseError, match="invalid character entity &b;"):
        parse_xml_payload(laughs)


def test_xml_values_are_all_strings() -> None:
    payload = parse_xml_payload(b"<a><n>1.50</n><t>true</t><e>-3</e></a>")
    assert payload == {"a": {"n": "1.50", "t": "true", "e": "-3"}}


def test_common_tokens_are_read_without_a_python_call_each() -> None:
    """issue 34: 25 MiB of XML is millions of tokens, and reading each one byte by byte through a dozen
    method calls took 28-40 s (webhook: 7-8 s). Start tags, end tags and plain text are now each one
    match: 30,000 elements (siblings, nesting, attributes and text) make fewer Python calls than elements
    (one for each element with attributes), where each token took a dozen."""
    calls = 0

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        calls += event == "call"

    n = 10_000
    bodies = [
        b"<r>" + b"<a/>" * n + b"</r>",
        b"<a>" * n + b"</a>" * n,
        b"<r>" + b"".join(b'<a k%d="v" j=\'w\'>t</a>\n' % (i % 50) for i in range(n)) + b"</r>",
    ]
    for body in bodies:
        sys.setprofile(count)
        try:
            parse_xml_payload(body)
        finally:
            sys.setprofile(None)
    assert calls < 3 * n // 2, f"{calls} Python calls for {3 * n} elements"
