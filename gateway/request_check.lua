-- The strict request check: what reaches the gRPC-JSON transcoder is JSON as RFC 8259
-- defines it, whose fields have the JSON types of the request message; anything else is
-- refused here with 400 solicitud_invalida and a one-line `detalle` that names the field
-- (or the line and column) and what was expected, and never repeats any part of the body
-- (the Fan ID travels in bodies precisely to stay out of logs and URLs). The parse stops
-- at the binding's limits (api/edge_limits.py): an object with more than MAX_MEMBERS
-- members or a list with more than the route's max_elements is 413 solicitud_muy_grande,
-- a list of codes over it demasiados_codigos (the server's own detalle), deeper than
-- MAX_DEPTH 400; so the work before a refusal is bounded by the limits, not by the body.
--
-- Why it exists: the transcoder reads bodies with protobuf's JSON stream parser, which
-- (Envoy 1.40, measured) accepts trailing commas, single-quoted strings, unquoted keys,
-- `1.`, raw control characters in strings, unknown escapes ("\x" -> "x"), a vertical tab
-- as whitespace; lets a duplicated key win (and a repeated field append); flattens nested
-- lists into a repeated string field ({"codigos":[[["hd-1"]],[]]} redeemed HD-1) and drops
-- nulls from it; reads a lone string as a list of one; maps query parameters of a POST onto
-- body fields; reads a GET's body; and answers what it refuses in English, several lines
-- long, quoting the body around a caret.
--
-- Where it runs (gateway/envoy.yaml): after the buffer filter, so the body is complete
-- and within its route's limit; before the transcoder. It checks the requests of the
-- bindings only, known by their route's name (envoy.yaml names each binding route
-- "METHOD /path", matching every form of the path the transcoder maps to it); envelope.lua
-- (the first filter) answers every other /api/v1/ path from its headers. A refusal is a
-- local reply that envelope.lua turns into the envelope; the codigo and detalle travel to
-- it in the stream's dynamic metadata (loyalty.envelope / codigo, detalle), so envelope.lua
-- can tell them from Envoy's own texts, which it never shows for a 400. A bug here (a Lua
-- error) fails closed: 500 error_interno, logged as "request_check.lua: ..." (the e2e
-- tests check the log).
--
-- The rules (docs/requests.md):
-- * A request to a binding of ROUTES:
--   - a binding without body (GET) takes none: a non-empty body is refused;
--   - a binding with body: no query parameter may name a field (they go in the body);
--     unknown parameters are ignored, as the transcoder does;
--   - a GET: a field may come once in the query string, its value valid UTF-8.
-- * A non-empty body: Content-Type application/json (charset, if
--   any, utf-8), no Content-Encoding, valid UTF-8 without a BOM, exactly one JSON object
--   (RFC 8259 grammar: " strings with the RFC's escapes and paired surrogates, numbers
--   -?(0|[1-9]d*)(.d+)?([eE][+-]?d+)? within a double's range, true/false/null, whitespace
--   space/tab/CR/LF only), no key twice in any object (a field's proto and JSON names are
--   one field), at most MAX_DEPTH levels deep; a field of the binding's request message
--   has its kind's JSON type ("s": text; "S": list of texts; "v": any JSON value, whose
--   type the server checks with the field's own error code; null = not sent); unknown
--   fields are ignored; a field for native gRPC callers only ("n", the proto's
--   `nativo_de` option) is refused wherever it comes (body or URL), with its detalle
--   (the JSON field to send instead).
--
-- Lua notes: patterns use %z for NUL; string.find with "^" and an init anchors there;
-- nothing here yields except handle:body(), so the parse never interleaves with another
-- request on this worker's Lua state; the header map cannot even be read after body()
-- ("object used outside of proper scope"), so every header is read before it.

-- BEGIN ROUTES (written by scripts/gen_request_check.py from proto/loyalty/v1/pos_service.proto and src/loyalty_grpc/api/edge_limits.py; do not edit by hand)
local MAX_DEPTH = 8
local MAX_MEMBERS = 64
local CONTENT_TYPE_JSON = "Content-Type: debe ser application/json"
local ROUTES = {
  ["GET /api/v1/ping"] = {
    body = false,
    no_body = "GET /api/v1/ping: no lleva cuerpo; sus parámetros van en la URL",
    limit = 4096,
    too_large = "GET /api/v1/ping: no lleva cuerpo; sus parámetros van en la URL",
    max_elements = 64,
    members = "cuerpo: un objeto con más de 64 campos (GET /api/v1/ping)",
    elements = "%s: una lista con más de 64 elementos (GET /api/v1/ping)",
    too_many = {},
    fields = {},
  },
  ["GET /api/v1/promos"] = {
    body = false,
    no_body = "GET /api/v1/promos: no lleva cuerpo; sus parámetros van en la URL",
    limit = 4096,
    too_large = "GET /api/v1/promos: no lleva cuerpo; sus parámetros van en la URL",
    max_elements = 64,
    members = "cuerpo: un objeto con más de 64 campos (GET /api/v1/promos)",
    elements = "%s: una lista con más de 64 elementos (GET /api/v1/promos)",
    too_many = {},
    fields = {},
  },
  ["GET /api/v1/roster"] = {
    body = false,
    no_body = "GET /api/v1/roster: no lleva cuerpo; sus parámetros van en la URL",
    limit = 4096,
    too_large = "GET /api/v1/roster: no lleva cuerpo; sus parámetros van en la URL",
    max_elements = 64,
    members = "cuerpo: un objeto con más de 64 campos (GET /api/v1/roster)",
    elements = "%s: una lista con más de 64 elementos (GET /api/v1/roster)",
    too_many = {},
    fields = {
      ["desde"] = {"desde", "s"},
      ["limite"] = {"limite", "s"},
    },
  },
  ["POST /api/v1/codes"] = {
    body = true,
    limit = 704512,
    too_large = "POST /api/v1/codes: el cuerpo pasa de 704512 bytes, lo más que admite esta operación",
    max_elements = 5000,
    members = "cuerpo: un objeto con más de 64 campos (POST /api/v1/codes)",
    elements = "%s: una lista con más de 5000 elementos (POST /api/v1/codes)",
    too_many = {
      ["codigos"] = "codigos: más de 5000 códigos en una llamada; envíelos en varias",
      ["codes"] = "codes: más de 5000 códigos en una llamada; envíelos en varias",
    },
    fields = {
      ["codes"] = {"codes", "v"},
      ["codigos"] = {"codigos", "v"},
      ["codigosLista"] = {"codigos_lista", "n", "codigos_lista: campo solo para clientes gRPC nativos, no existe en la API JSON; envíe codigos"},
      ["codigos_lista"] = {"codigos_lista", "n", "codigos_lista: campo solo para clientes gRPC nativos, no existe en la API JSON; envíe codigos"},
      ["promo"] = {"promo", "v"},
      ["promoId"] = {"promo_id", "v"},
      ["promoIdEntero"] = {"promo_id_entero", "n", "promo_id_entero: campo solo para clientes gRPC nativos, no existe en la API JSON; envíe promo"},
      ["promoTexto"] = {"promo_texto", "n", "promo_texto: campo solo para clientes gRPC nativos, no existe en la API JSON; envíe promo"},
      ["promo_id"] = {"promo_id", "v"},
      ["promo_id_entero"] = {"promo_id_entero", "n", "promo_id_entero: campo solo para clientes gRPC nativos, no existe en la API JSON; envíe promo"},
      ["promo_texto"] = {"promo_texto", "n", "promo_texto: campo solo para clientes gRPC nativos, no existe en la API JSON; envíe promo"},
    },
  },
  ["POST /api/v1/fan/resolve"] = {
    body = true,
    limit = 8192,
    too_large = "POST /api/v1/fan/resolve: el cuerpo pasa de 8192 bytes, lo más que admite esta operación",
    max_elements = 64,
    members = "cuerpo: un objeto con más de 64 campos (POST /api/v1/fan/resolve)",
    elements = "%s: una lista con más de 64 elementos (POST /api/v1/fan/resolve)",
    too_many = {},
    fields = {
      ["codigo"] = {"codigo", "s"},
      ["fan"] = {"fan", "s"},
      ["fanId"] = {"fan_id", "s"},
      ["fan_id"] = {"fan_id", "s"},
      ["qr"] = {"qr", "s"},
    },
  },
  ["POST /api/v1/ping"] = {
    body = true,
    limit = 4096,
    too_large = "POST /api/v1/ping: el cuerpo pasa de 4096 bytes, lo más que admite esta operación",
    max_elements = 64,
    members = "cuerpo: un objeto con más de 64 campos (POST /api/v1/ping)",
    elements = "%s: una lista con más de 64 elementos (POST /api/v1/ping)",
    too_many = {},
    fields = {},
  },
  ["POST /api/v1/redeem"] = {
    body = true,
    limit = 73728,
    too_large = "POST /api/v1/redeem: el cuerpo pasa de 73728 bytes, lo más que admite esta operación",
    max_elements = 500,
    members = "cuerpo: un objeto con más de 64 campos (POST /api/v1/redeem)",
    elements = "%s: una lista con más de 500 elementos (POST /api/v1/redeem)",
    too_many = {
      ["codigos"] = "codigos: más de 500 códigos en una llamada; envíelos en varias",
    },
    fields = {
      ["caja"] = {"caja", "s"},
      ["codigo"] = {"codigo", "s"},
      ["codigos"] = {"codigos", "S"},
      ["terminal"] = {"terminal", "s"},
      ["ts"] = {"ts", "v"},
      ["tsUtc"] = {"ts_utc", "n", "ts_utc: campo solo para clientes gRPC nativos, no existe en la API JSON; envíe ts"},
      ["ts_utc"] = {"ts_utc", "n", "ts_utc: campo solo para clientes gRPC nativos, no existe en la API JSON; envíe ts"},
    },
  },
  ["POST /api/v1/roster"] = {
    body = true,
    limit = 4096,
    too_large = "POST /api/v1/roster: el cuerpo pasa de 4096 bytes, lo más que admite esta operación",
    max_elements = 64,
    members = "cuerpo: un objeto con más de 64 campos (POST /api/v1/roster)",
    elements = "%s: una lista con más de 64 elementos (POST /api/v1/roster)",
    too_many = {},
    fields = {
      ["desde"] = {"desde", "v"},
      ["desdeTexto"] = {"desde_texto", "n", "desde_texto: campo solo para clientes gRPC nativos, no existe en la API JSON; envíe desde"},
      ["desde_texto"] = {"desde_texto", "n", "desde_texto: campo solo para clientes gRPC nativos, no existe en la API JSON; envíe desde"},
      ["limite"] = {"limite", "v"},
      ["limiteEntero"] = {"limite_entero", "n", "limite_entero: campo solo para clientes gRPC nativos, no existe en la API JSON; envíe limite"},
      ["limite_entero"] = {"limite_entero", "n", "limite_entero: campo solo para clientes gRPC nativos, no existe en la API JSON; envíe limite"},
    },
  },
  ["POST /api/v1/tx"] = {
    body = true,
    limit = 12288,
    too_large = "POST /api/v1/tx: el cuerpo pasa de 12288 bytes, lo más que admite esta operación",
    max_elements = 64,
    members = "cuerpo: un objeto con más de 64 campos (POST /api/v1/tx)",
    elements = "%s: una lista con más de 64 elementos (POST /api/v1/tx)",
    too_many = {},
    fields = {
      ["amountCents"] = {"amount_cents", "v"},
      ["amount_cents"] = {"amount_cents", "v"},
      ["caja"] = {"caja", "s"},
      ["centavos"] = {"centavos", "v"},
      ["codigo"] = {"codigo", "s"},
      ["fan"] = {"fan", "s"},
      ["fanId"] = {"fan_id", "s"},
      ["fan_id"] = {"fan_id", "s"},
      ["id"] = {"id", "s"},
      ["idExterno"] = {"id_externo", "s"},
      ["id_externo"] = {"id_externo", "s"},
      ["importe"] = {"importe", "v"},
      ["importeCentavos"] = {"importe_centavos", "v"},
      ["importeCentavosEntero"] = {"importe_centavos_entero", "n", "importe_centavos_entero: campo solo para clientes gRPC nativos, no existe en la API JSON; envíe importe_centavos"},
      ["importeTexto"] = {"importe_texto", "n", "importe_texto: campo solo para clientes gRPC nativos, no existe en la API JSON; envíe importe"},
      ["importe_centavos"] = {"importe_centavos", "v"},
      ["importe_centavos_entero"] = {"importe_centavos_entero", "n", "importe_centavos_entero: campo solo para clientes gRPC nativos, no existe en la API JSON; envíe importe_centavos"},
      ["importe_texto"] = {"importe_texto", "n", "importe_texto: campo solo para clientes gRPC nativos, no existe en la API JSON; envíe importe"},
      ["moneda"] = {"moneda", "s"},
      ["qr"] = {"qr", "s"},
      ["sitio"] = {"sitio", "s"},
      ["sucursal"] = {"sucursal", "s"},
      ["terminal"] = {"terminal", "s"},
      ["ts"] = {"ts", "v"},
      ["tsUtc"] = {"ts_utc", "n", "ts_utc: campo solo para clientes gRPC nativos, no existe en la API JSON; envíe ts"},
      ["ts_utc"] = {"ts_utc", "n", "ts_utc: campo solo para clientes gRPC nativos, no existe en la API JSON; envíe ts"},
      ["txId"] = {"tx_id", "s"},
      ["tx_id"] = {"tx_id", "s"},
    },
  },
}
-- END ROUTES

-- This file has a Lua state of its own (one per worker thread): LuaJIT's trace compiler
-- only hurts here (pattern matching cannot be compiled; recording and aborting traces made
-- the check cost a tx 33 µs of Envoy CPU instead of about 10: bench/request_check.py).
if jit ~= nil then
  jit.off()
end

local METADATA_NAMESPACE = "loyalty.envelope"

local byte, char, find, format, gsub, lower, match, sub =
  string.byte, string.char, string.find, string.format, string.gsub, string.lower,
  string.match, string.sub
local concat, floor = table.concat, math.floor

-- The JSON type of a value, in the words of domain/json_value.py json_type_name.
local TYPE_NAME = {
  texto = "un texto", numero = "un número", booleano = "un booleano", null = "null",
  lista = "una lista", objeto = "un objeto",
}

-- The codigos of its refusals: envelope.lua writes their envelope (with the catalogue's
-- status), so scripts/gen_envelope.py puts them in its catalogue block.
local CODIGO = {
  invalida = "solicitud_invalida",
  muy_grande = "solicitud_muy_grande",
  demasiados_codigos = "demasiados_codigos",
}

-- A refusal travels as an error object (caught by the pcall in envoy_on_request):
-- solicitud_invalida unless `codigo` says otherwise.
local Refusal = {}

local function refuse(detalle, codigo)
  error(setmetatable({detalle = detalle, codigo = codigo or CODIGO.invalida}, Refusal), 0)
end

-- "línea L, columna C" of byte `pos` (1-based); columns count characters.
local function where(s, pos)
  local line, start = 1, 1
  local nl = find(s, "\n", 1, true)
  while nl ~= nil and nl < pos do
    line, start = line + 1, nl + 1
    nl = find(s, "\n", start, true)
  end
  local _, continuation = gsub(sub(s, start, pos - 1), "[\128-\191]", "")
  return format("línea %d, columna %d", line, pos - start - continuation + 1)
end

-- A syntax error at byte `pos`: "<campo or cuerpo>: JSON no válido en la línea L,
-- columna C: <problema>".
local function syntax(p, pos, problema)
  refuse(format("%s: JSON no válido en la %s: %s", p.campo or "cuerpo", where(p.s, pos),
                problema))
end

local function wrong_type(label, esperado, tipo)
  refuse(format("%s: debe ser %s; llegó %s", label, esperado, TYPE_NAME[tipo]))
end

-- What the byte at `pos` is, when a JSON value was expected there.
local function value_problem(s, pos)
  local c = sub(s, pos, pos)
  if c == "" then
    return "el cuerpo termina antes de tiempo"
  elseif c == "'" then
    return "los textos van entre comillas dobles, no simples"
  elseif c == "/" or c == "#" then
    return "JSON no admite comentarios"
  elseif find(s, "^-?Infinity", pos) or find(s, "^NaN", pos) then
    return "NaN e Infinity no son números JSON"
  elseif c == "+" then
    return "un número no lleva signo +"
  elseif c == "." then
    return "un número empieza con un dígito (0.5, no .5)"
  elseif c == "," then
    return "falta un valor antes de la coma"
  elseif c == "]" or c == "}" then
    return "falta un valor"
  elseif find(s, "^[TFN]", pos) then
    return "true, false y null van en minúsculas"
  end
  return "se esperaba un valor JSON (un texto entre comillas dobles, un número, un objeto, "
    .. "una lista, true, false o null)"
end

-- What the byte at `pos` is, when a field name (or the end of the object) was expected.
-- `number_before`: the field (its proto name, or "el campo anterior") whose value, a
-- number, came just before the comma: a digit here is most likely a decimal comma.
local function key_problem(s, pos, number_before)
  local c = sub(s, pos, pos)
  if number_before ~= nil and find(c, "^%d") then
    return format('%s: ¿un número con coma decimal? va entre comillas ("12,5") o con '
                  .. "punto decimal (12.5)", number_before)
  elseif c == "" then
    return "el cuerpo termina antes de tiempo"
  elseif c == "}" then
    return "sobra una coma antes de cerrar el objeto"
  elseif c == "," then
    return "sobra una coma (dos seguidas, o una al principio del objeto)"
  elseif c == "'" then
    return "los nombres de campo van entre comillas dobles, no simples"
  elseif c == "/" or c == "#" then
    return "JSON no admite comentarios"
  elseif find(c, "^[%w_$]") then
    return "los nombres de campo van entre comillas dobles"
  end
  return "se esperaba el nombre de un campo entre comillas dobles"
end

-- What the byte at `pos` is, when "," or the closing bracket was expected.
local function separator_problem(s, pos, closing)
  local c = sub(s, pos, pos)
  if c == "" then
    return "el cuerpo termina antes de tiempo"
  elseif c == "/" or c == "#" then
    return "JSON no admite comentarios"
  end
  return format("se esperaba una coma o %s después del valor", closing)
end

-- The position of the first byte at or after `pos` that is not JSON whitespace.
local function skip(s, pos)
  local c = byte(s, pos)
  if c ~= 32 and c ~= 9 and c ~= 10 and c ~= 13 then
    return pos  -- the common case: no whitespace, no pattern
  end
  local _, last = find(s, "^[ \t\n\r]*", pos)
  return last + 1
end

local function hex4(s, i)
  local digits = sub(s, i, i + 3)
  if find(digits, "^%x%x%x%x$") then
    return tonumber(digits, 16)
  end
  return nil
end

local SIMPLE_ESCAPES = {
  [34] = '"', [92] = "\\", [47] = "/", [98] = "\b", [102] = "\f", [110] = "\n",
  [114] = "\r", [116] = "\t",
}

-- A string at `pos` (its opening quote): returns the position after the closing quote and
-- whether it holds escapes.
local function scan_string(p, pos)
  local s = p.s
  local i = pos + 1
  local escaped = false
  while true do
    local j = find(s, '["\\%z\1-\31]', i)
    if j == nil then
      syntax(p, pos, "un texto no se cierra (falta la comilla doble final)")
    end
    local c = byte(s, j)
    if c == 34 then
      return j + 1, escaped
    end
    if c ~= 92 then
      syntax(p, j, "un carácter de control sin escapar dentro de un texto "
                   .. "(escríbalo como \\n, \\t o \\u00XX)")
    end
    escaped = true
    local e = byte(s, j + 1)
    if e == 117 then  -- \uXXXX
      local cp = hex4(s, j + 2)
      if cp == nil then
        syntax(p, j, "un escape \\u necesita 4 dígitos hexadecimales")
      elseif cp >= 0xD800 and cp <= 0xDBFF then
        local low = sub(s, j + 6, j + 7) == "\\u" and hex4(s, j + 8) or nil
        if low == nil or low < 0xDC00 or low > 0xDFFF then
          syntax(p, j, "un sustituto UTF-16 alto (\\uD800 a \\uDBFF) sin su pareja baja")
        end
        i = j + 12
      elseif cp >= 0xDC00 and cp <= 0xDFFF then
        syntax(p, j, "un sustituto UTF-16 bajo (\\uDC00 a \\uDFFF) sin su pareja alta")
      else
        i = j + 6
      end
    elseif e ~= nil and SIMPLE_ESCAPES[e] ~= nil then
      i = j + 2
    else
      syntax(p, j, "un escape no válido (se admiten \\\" \\\\ \\/ \\b \\f \\n \\r \\t "
                   .. "y \\uXXXX)")
    end
  end
end

local function utf8_char(cp)
  if cp < 0x80 then
    return char(cp)
  elseif cp < 0x800 then
    return char(0xC0 + floor(cp / 64), 0x80 + cp % 64)
  elseif cp < 0x10000 then
    return char(0xE0 + floor(cp / 4096), 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
  end
  return char(0xF0 + floor(cp / 262144), 0x80 + floor(cp / 4096) % 64,
              0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
end

-- The text of a key with escapes (already validated by scan_string), decoded.
local function unescape_json(raw)
  local out, i = {}, 1
  while true do
    local j = find(raw, "\\", i, true)
    if j == nil then
      out[#out + 1] = sub(raw, i)
      return concat(out)
    end
    out[#out + 1] = sub(raw, i, j - 1)
    local e = byte(raw, j + 1)
    if e == 117 then
      local cp = tonumber(sub(raw, j + 2, j + 5), 16)
      i = j + 6
      if cp >= 0xD800 and cp <= 0xDBFF then
        cp = 0x10000 + (cp - 0xD800) * 1024 + (tonumber(sub(raw, j + 8, j + 11), 16) - 0xDC00)
        i = j + 12
      end
      out[#out + 1] = utf8_char(cp)
    else
      out[#out + 1] = SIMPLE_ESCAPES[e]
      i = j + 2
    end
  end
end

local function scan_number(p, pos)
  local s = p.s
  local _, last = find(s, "^-?%d+", pos)
  if last == nil then
    syntax(p, pos + 1, value_problem(s, pos + 1))  -- "-" without digits: "-Infinity", "- 1"
  end
  if find(s, "^-?0%d", pos) then
    syntax(p, pos, "un número no lleva ceros a la izquierda")
  end
  local nxt = byte(s, last + 1)
  if nxt == 46 then  -- "."
    local _, fraction = find(s, "^%d+", last + 2)
    if fraction == nil then
      syntax(p, last + 1, "un punto decimal necesita dígitos a ambos lados (1.0, no 1.)")
    end
    last = fraction
    nxt = byte(s, last + 1)
  end
  if nxt == 101 or nxt == 69 then  -- "e" / "E"
    local _, exponent = find(s, "^[+-]?%d+", last + 2)
    if exponent == nil then
      syntax(p, last + 1, "un exponente necesita dígitos (1e5, 1e-5)")
    end
    last = exponent
  end
  if find(s, "^[%w.]", last + 1) then
    syntax(p, pos, "un número mal formado (solo dígitos decimales: sin hexadecimal, letras "
                   .. "ni varios puntos)")
  end
  local value = tonumber(sub(s, pos, last))
  if value == nil or value ~= value or value == math.huge or value == -math.huge then
    syntax(p, pos, "un número fuera del rango de un double (hasta 1.7976931348623157e308)")
  end
  return last + 1
end

local parse_object, parse_array

-- The value at `pos`: returns the position after it and its JSON type.
local function parse_value(p, pos, depth)
  local s = p.s
  local c = byte(s, pos)
  if c == 34 then
    return (scan_string(p, pos)), "texto"
  elseif c == 123 then
    return parse_object(p, pos, depth + 1, nil), "objeto"
  elseif c == 91 then
    return parse_array(p, pos, depth + 1, nil, nil), "lista"
  elseif c == 45 or (c ~= nil and c >= 48 and c <= 57) then
    return scan_number(p, pos), "numero"
  elseif c == 116 and sub(s, pos, pos + 3) == "true" then
    return pos + 4, "booleano"
  elseif c == 102 and sub(s, pos, pos + 4) == "false" then
    return pos + 5, "booleano"
  elseif c == 110 and sub(s, pos, pos + 3) == "null" then
    return pos + 4, "null"
  end
  syntax(p, pos, value_problem(s, pos))
end

local function too_deep(p, pos, depth)
  if depth > MAX_DEPTH then
    syntax(p, pos, format("anidado a más de %d niveles", MAX_DEPTH))
  end
end

-- A list at `pos`. `texts` (a field name) when every element must be a text; `codes` the
-- demasiados_codigos detalle when it is a list of codes. It may have the route's
-- max_elements elements.
parse_array = function(p, pos, depth, texts, codes)
  too_deep(p, pos, depth)
  local s = p.s
  pos = skip(s, pos + 1)
  if byte(s, pos) == 93 then
    return pos + 1
  end
  local index = 0
  local most = p.route.max_elements
  while true do
    if index >= most then
      if codes ~= nil then
        refuse(codes, CODIGO.demasiados_codigos)
      end
      refuse(format(p.route.elements, p.campo or "cuerpo"), CODIGO.muy_grande)
    end
    local after, tipo = parse_value(p, pos, depth)
    if texts ~= nil and tipo ~= "texto" then
      wrong_type(format("%s[%d]", texts, index), "un texto", tipo)
    end
    pos = skip(s, after)
    local c = byte(s, pos)
    if c == 93 then
      return pos + 1
    elseif c ~= 44 then
      syntax(p, pos, separator_problem(s, pos, "]"))
    end
    pos = skip(s, pos + 1)
    if byte(s, pos) == 93 then
      syntax(p, pos, "sobra una coma antes de cerrar la lista")
    end
    index = index + 1
  end
end

-- The value of a field of the request message (`field` = {proto name, kind}).
local function check_field(p, pos, depth, field)
  local name, kind = field[1], field[2]
  if byte(p.s, pos) == 91 and (kind == "S" or p.route.too_many[name] ~= nil) then
    return parse_array(p, pos, depth + 1, kind == "S" and name or nil, p.route.too_many[name])
  end
  local after, tipo = parse_value(p, pos, depth)
  if kind == "s" and tipo ~= "texto" and tipo ~= "null" then
    wrong_type(name, "un texto", tipo)
  elseif kind == "S" and tipo ~= "null" then
    wrong_type(name, "una lista de textos", tipo)
  end
  return after, tipo
end

-- An object at `pos`. `fields` (name -> {proto name, kind}) for the request body itself.
parse_object = function(p, pos, depth, fields)
  too_deep(p, pos, depth)
  local s = p.s
  local seen = {}
  local members = 0
  local number_before = nil  -- the previous member's name when its value was a number
  pos = skip(s, pos + 1)
  if byte(s, pos) == 125 then
    return pos + 1
  end
  while true do
    members = members + 1
    if members > MAX_MEMBERS then
      refuse(p.route.members, CODIGO.muy_grande)
    end
    if byte(s, pos) ~= 34 then
      syntax(p, pos, key_problem(s, pos, number_before))
    end
    local after, escaped = scan_string(p, pos)
    local key = sub(s, pos + 1, after - 2)
    if escaped then
      key = unescape_json(key)
    end
    local field = fields ~= nil and fields[key] or nil
    if field ~= nil and field[2] == "n" then
      refuse(field[3])
    end
    local id = field ~= nil and field[1] or key
    local before = seen[id]
    if before ~= nil then
      if field == nil then
        refuse(format("%s: un nombre se repite en el mismo objeto (%s)", p.campo or "cuerpo",
                      where(s, pos)))
      elseif before == key then
        refuse(format("%s: el campo aparece dos veces", id))
      end
      refuse(format("%s: el campo aparece dos veces (como %s y como %s)", id, before, key))
    end
    seen[id] = key
    pos = skip(s, after)
    if byte(s, pos) ~= 58 then
      syntax(p, pos, "falta \":\" entre el nombre de un campo y su valor")
    end
    pos = skip(s, pos + 1)
    local tipo
    if field ~= nil then
      p.campo = id
      pos, tipo = check_field(p, pos, depth, field)
      p.campo = nil
    else
      pos, tipo = parse_value(p, pos, depth)
    end
    -- (A client's own field name is never repeated: it is part of the body.)
    number_before = tipo == "numero" and (field ~= nil and id or "el campo anterior") or nil
    pos = skip(s, pos)
    local c = byte(s, pos)
    if c == 125 then
      return pos + 1
    elseif c ~= 44 then
      syntax(p, pos, separator_problem(s, pos, "}"))
    end
    pos = skip(s, pos + 1)
  end
end

-- Position of the first byte of `s` that is not part of valid UTF-8 (overlong forms,
-- surrogates and code points over U+10FFFF included), or nil.
local function invalid_utf8(s)
  local i = find(s, "[\128-\255]")
  while i ~= nil do
    local c = byte(s, i)
    local len, cp
    if c >= 0xC2 and c <= 0xDF then
      len, cp = 2, c - 0xC0
    elseif c >= 0xE0 and c <= 0xEF then
      len, cp = 3, c - 0xE0
    elseif c >= 0xF0 and c <= 0xF4 then
      len, cp = 4, c - 0xF0
    else
      return i
    end
    for j = i + 1, i + len - 1 do
      local b = byte(s, j)
      if b == nil or b < 0x80 or b > 0xBF then
        return i
      end
      cp = cp * 64 + (b - 0x80)
    end
    if (len == 3 and (cp < 0x800 or (cp >= 0xD800 and cp <= 0xDFFF)))
        or (len == 4 and (cp < 0x10000 or cp > 0x10FFFF)) then
      return i
    end
    i = find(s, "[\128-\255]", i + len)
  end
  return nil
end

-- The JSON type of the value starting at `pos` (the body's first byte), for the message
-- of a body that is not an object.
local FIRST_BYTE_TYPE = {
  [34] = "texto", [91] = "lista", [45] = "numero", [116] = "booleano", [102] = "booleano",
  [110] = "null",
}

-- The usual body, an object whose members are all texts without escapes or control
-- characters, each name once, checked with one pattern match per member instead of the
-- parse below (which would find nothing wrong in it). Any other body (a number, an escape,
-- a list, a field of the wrong kind, a name twice, a syntax error) is left to the parse,
-- which also words every refusal: true only when `s` is such an object and its members
-- are what the route's fields take ("s", "v" or unknown). `s` is valid UTF-8 without BOM.
local PLAIN_MEMBER = '^[ \t\n\r]*"([^"\\%z\1-\31]*)"[ \t\n\r]*:[ \t\n\r]*"[^"\\%z\1-\31]*"'
  .. '[ \t\n\r]*([,}])()'

local function plain_object(s, fields)
  local pos = match(s, "^[ \t\n\r]*{()")
  if pos == nil then
    return false
  end
  local seen, members = {}, 0
  while true do
    local key, after, nxt = match(s, PLAIN_MEMBER, pos)
    members = members + 1
    if key == nil or members > MAX_MEMBERS then
      return false
    end
    local field = fields[key]
    local id = key
    if field ~= nil then
      if field[2] ~= "s" and field[2] ~= "v" then
        return false
      end
      id = field[1]
    end
    if seen[id] ~= nil then
      return false
    end
    seen[id] = true
    if after == "}" then
      return find(s, "^[ \t\n\r]*$", nxt) ~= nil
    end
    pos = nxt
  end
end

local function check_body(s, route)
  local fields = route.fields
  local bad = invalid_utf8(s)
  if bad ~= nil then
    refuse(format("cuerpo: no es UTF-8 válido (byte %d)", bad))
  end
  if sub(s, 1, 3) == "\239\187\191" then
    refuse("cuerpo: empieza con una marca de orden de bytes (BOM, U+FEFF); envíe UTF-8 "
           .. "sin ella")
  end
  if plain_object(s, fields) then
    return
  end
  local p = {s = s, campo = nil, route = route}
  local pos = skip(s, 1)
  local c = byte(s, pos)
  if c == nil then
    refuse("cuerpo: solo tiene espacios; envíe un objeto JSON o ningún cuerpo")
  elseif c ~= 123 then
    local tipo = FIRST_BYTE_TYPE[c] or ((c >= 48 and c <= 57) and "numero" or nil)
    if tipo == nil then
      syntax(p, pos, value_problem(s, pos))
    end
    parse_value(p, pos, 0)  -- a syntax error inside it comes first
    refuse("cuerpo: debe ser un objeto JSON; llegó " .. TYPE_NAME[tipo])
  end
  pos = skip(s, parse_object(p, pos, 1, fields))
  if pos <= #s then
    local problem = value_problem(s, pos)
    if problem ~= "JSON no admite comentarios" then
      problem = "hay algo más después del objeto JSON"
    end
    syntax(p, pos, problem)
  end
end

local function check_content_headers(content_type, content_encoding)
  if content_encoding == nil and content_type == "application/json" then
    return  -- the usual request: nothing to read in them
  end
  if content_encoding ~= nil and lower(content_encoding) ~= "identity" then
    refuse("Content-Encoding: no se admite; envíe el cuerpo sin comprimir")
  end
  if content_type == nil then
    refuse("Content-Type: falta; un cuerpo JSON se envía con Content-Type: "
           .. "application/json")
  end
  local value = lower(content_type)
  local media, parameters = match(value, "^[ \t]*([^; \t]+)[ \t]*(.*)$")
  if media ~= "application/json" then
    refuse(CONTENT_TYPE_JSON)
  end
  for name, parameter in string.gmatch(parameters, ';[ \t]*([^=; \t]+)[ \t]*=[ \t]*"?([^;" \t]*)') do
    if name == "charset" and parameter ~= "utf-8" then
      refuse("Content-Type: el JSON va en UTF-8 (charset=utf-8, o sin charset)")
    end
  end
end

local function percent_decode(text)
  return (gsub(text, "%%(%x%x)", function(hex) return char(tonumber(hex, 16)) end))
end

-- The query string (without "?") of a request to `route`.
local function check_query(route, query)
  if find(query, "%", 1, true) ~= nil and find((gsub(query, "%%%x%x", "")), "%", 1, true) then
    refuse("URL: un escape % mal formado en los parámetros (se escribe %XX, dos dígitos "
           .. "hexadecimales)")
  end
  local seen = {}
  for pair in string.gmatch(query, "[^&]+") do
    local name, value = match(pair, "^([^=]*)=?(.*)$")
    local field = route.fields[match(percent_decode(name), "^[^.]*")]
    if field ~= nil then
      local id = field[1]
      if field[2] == "n" then
        refuse(field[3])
      elseif route.body then
        refuse(id .. ": va en el cuerpo JSON, no en la URL")
      elseif seen[id] then
        refuse(id .. ": el parámetro aparece dos veces en la URL")
      end
      seen[id] = true
      if invalid_utf8(percent_decode(value)) ~= nil then
        refuse(id .. ": no es UTF-8 válido")
      end
    end
  end
end

local function check(handle)
  local route = ROUTES[handle:streamInfo():routeName()]
  if route == nil then
    return
  end
  local headers = handle:headers()
  local target = headers:get(":path")
  local query_at = target ~= nil and find(target, "?", 1, true) or nil
  if query_at ~= nil and query_at < #target then
    check_query(route, sub(target, query_at + 1))
  end
  local content_type = headers:get("content-type")
  local content_encoding = headers:get("content-encoding")
  local body = handle:body()
  if body == nil then
    return
  end
  local length = body:length()
  if length == 0 then
    return
  end
  if length > route.limit then
    -- The buffer filter cuts a body over its limit while it is read, but lets one through
    -- that arrived whole in one read (an HTTP/2 DATA frame of up to 16 KiB with
    -- END_STREAM): the same refusal, from here.
    refuse(route.too_large, CODIGO.muy_grande)
  elseif not route.body then
    refuse(route.no_body)
  end
  check_content_headers(content_type, content_encoding)
  check_body(body:getBytes(0, length), route)
end

function envoy_on_request(handle)
  local ok, err = pcall(check, handle)
  if ok then
    return
  end
  if getmetatable(err) ~= Refusal then
    pcall(function() handle:logErr("request_check.lua: " .. tostring(err)) end)
    handle:respond({[":status"] = "500"}, "")
    return
  end
  local metadata = handle:streamInfo():dynamicMetadata()
  metadata:set(METADATA_NAMESPACE, "codigo", err.codigo)
  metadata:set(METADATA_NAMESPACE, "detalle", err.detalle)
  -- (envelope.lua gives the reply the status of the codigo in the catalogue.)
  handle:respond({[":status"] = "400"}, err.detalle)
end
