"""Finding values in a request (dotted paths) and rendering them to strings exactly as Go prints them."""

# Interface filled in by the params work:
#   class JSONNumber(str)                      a JSON number kept as its literal text
#   loads_json(text: str | bytes) -> Any       JSON with numbers as JSONNumber
#   go_json_dumps(value: Any) -> str           Go's json.Marshal (sorted keys, \u003c \u003e \u0026)
#   render_value(value: Any) -> str            webhook's ExtractParameterAsString rendering
#   get_parameter(name: str, params: Any) -> Any          raises ParameterNodeError
#   replace_parameter(name: str, params: Any, value: Any) -> bool
#   argument_value(arg: Argument, req: Request) -> str    webhook's Argument.Get
