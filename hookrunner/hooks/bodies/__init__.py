"""webhook's four request body parsers: JSON, URL-encoded form, XML and multipart."""

from hookrunner.hooks.bodies.form import parse_form_payload
from hookrunner.hooks.bodies.json import parse_json_payload
from hookrunner.hooks.bodies.multipart import parse_multipart
from hookrunner.hooks.bodies.xml import parse_xml_payload

__all__ = ["parse_form_payload", "parse_json_payload", "parse_multipart", "parse_xml_payload"]
