-- The envelope filter: every response that leaves Envoy is either a transcoded success
-- ({"ok":true,"data":...}) or the error envelope
--   {"ok":false,"error":{"codigo":...,"mensaje":...,"detalle":...}}
-- with Content-Type application/json, and carries no gRPC or internal header.
--
-- It is listed BEFORE the gRPC-JSON transcoder in envoy.yaml, so on the way out it sees
-- the response after the transcoder (and every local reply of Envoy: the transcoder's
-- 400/404/413, the buffer filter's 413, the router's 503, the codec's 400/431).
--
-- Three kinds of response reach envoy_on_response:
--   1. An error of the gRPC server: a trailers-only gRPC error whose headers carry
--      `x-http-status` (e.g. "404") and `x-envelope` (the complete envelope JSON, ASCII).
--      -> :status := x-http-status, body := x-envelope.
--      (The server sends those two only to calls carrying the gateway mark
--      `x-loyalty-gateway: 1`, which envoy.yaml's route table sets on every request it
--      forwards, overwriting a client's: api/gateway_protocol.py.)
--   2. Any other failure (Envoy's own replies, or a gRPC error without x-envelope).
--      -> the envelope of the catalogue entry for that HTTP (or gRPC) status, built here.
--      A refusal of request_check.lua (the strict request check, a 400) is one of these:
--      its detalle comes in the stream's dynamic metadata. Envoy's own text is never the
--      detalle of a 400 (the transcoder's quotes the body).
--   3. A success (2xx, no gRPC error): left alone except for the header clean-up.
-- In all three, every header not in ALLOWED_HEADERS (grpc-*, x-envelope, x-http-status,
-- any other upstream metadata) is removed, and on HTTP/2 the trailers are emptied.
--
-- Rules learned the hard way (Envoy 1.40):
--   * A Lua runtime error lets the raw response through (grpc-* headers, text/plain
--     bodies), so everything runs under pcall and falls back to a fixed envelope.
--   * Headers must be modified before body() is called.
--   * A header map must not be modified while it is being iterated: collect, then remove.
--   * headers:get() of an absent header returns nothing (not even nil), so
--     tonumber(headers:get("x")) raises "bad argument #1 to 'tonumber'".
--   * body(true) on a headers-only (trailers-only) response returns an empty buffer
--     that setBytes() can fill (it also sets content-length).
--
-- The catalogue block below is generated from src/loyalty_grpc/domain/errors.py (CATALOGO)
-- by scripts/gen_envelope.py: the codigos this file names (BY_HTTP_STATUS, BY_GRPC_STATUS,
-- its fallbacks), each with its HTTP status and mensaje. A test keeps it fresh.

-- BEGIN CATALOGO (written by scripts/gen_envelope.py from src/loyalty_grpc/domain/errors.py; do not edit by hand)
local CATALOGO = {
  solicitud_invalida = {400, "La solicitud no es válida."},
  no_autenticado = {401, "Falta la clave de API."},
  permiso_denegado = {403, "La clave no tiene permiso para esto."},
  ruta_no_encontrada = {404, "La ruta no existe."},
  tiempo_agotado = {408, "La solicitud no llegó a tiempo."},
  solicitud_muy_grande = {413, "La solicitud es demasiado grande."},
  demasiadas_llamadas = {429, "Demasiadas llamadas."},
  error_interno = {500, "Error interno."},
  no_implementado = {501, "Operación aún no disponible."},
  servicio_no_disponible = {503, "Servicio no disponible."},
}
-- END CATALOGO

-- HTTP status of a failure -> codigo. Statuses not listed: 4xx -> solicitud_invalida,
-- 5xx (and anything else) -> error_interno.
local BY_HTTP_STATUS = {
  [400] = "solicitud_invalida",
  [401] = "no_autenticado",
  [403] = "permiso_denegado",
  [404] = "ruta_no_encontrada",
  [405] = "ruta_no_encontrada",
  [408] = "tiempo_agotado",        -- headers, whole request or a pause over Envoy's timeouts
  [413] = "solicitud_muy_grande",
  [431] = "solicitud_muy_grande",   -- request headers too large
  [429] = "demasiadas_llamadas",
  [500] = "error_interno",
  [501] = "no_implementado",
  [502] = "servicio_no_disponible",
  [503] = "servicio_no_disponible",
  [504] = "servicio_no_disponible",
}

-- grpc-status of an Envoy reply to a native gRPC request (:status 200, e.g. the 404 of
-- the route that refuses gRPC becomes UNIMPLEMENTED) -> codigo.
local BY_GRPC_STATUS = {
  ["3"] = "solicitud_invalida",        -- INVALID_ARGUMENT
  ["5"] = "ruta_no_encontrada",        -- NOT_FOUND
  ["7"] = "permiso_denegado",          -- PERMISSION_DENIED
  ["8"] = "demasiadas_llamadas",       -- RESOURCE_EXHAUSTED
  ["12"] = "ruta_no_encontrada",       -- UNIMPLEMENTED (Envoy's 404 for gRPC callers)
  ["14"] = "servicio_no_disponible",   -- UNAVAILABLE
  ["16"] = "no_autenticado",           -- UNAUTHENTICATED
}

-- Fixed detalle for server-side failures: never Envoy's text (upstream addresses, reset
-- reasons) nor grpc-message (it may hold internals); and for Envoy's timeouts, whose text
-- is English ("request timeout", "stream timeout", "request header timeout").
local DETALLE_FIJO = {
  servicio_no_disponible = "El servidor no responde; se puede reintentar.",
  tiempo_agotado = "la solicitud no llegó completa a tiempo (cabeceras o cuerpo lentos o detenidos); no se hizo nada, envíela de nuevo",
  error_interno = "",
  no_implementado = "",
}

-- The only response headers a client may see. Everything else (grpc-status,
-- grpc-message, grpc-status-details-bin, grpc-accept-encoding, x-envelope,
-- x-http-status, any metadata the server sets) is dropped. The codec adds date,
-- connection and transfer-encoding after the filters.
local ALLOWED_HEADERS = {
  ["content-type"] = true,
  ["content-length"] = true,
  ["retry-after"] = true,        -- 429 demasiadas_llamadas
  ["ratelimit"] = true,          -- IETF RateLimit fields (per-key call limit), on every
  ["ratelimit-policy"] = true,   -- response of an authenticated POS call
  ["x-request-id"] = true,       -- Envoy's request id, for support
  ["cache-control"] = true,
  ["strict-transport-security"] = true,  -- HSTS, rendered with TLS only (config.add_hsts)
}

local METADATA_NAMESPACE = "loyalty.envelope"
local MAX_DETALLE = 300

local JSON_ESCAPES = {
  [8] = "\\b", [9] = "\\t", [10] = "\\n", [12] = "\\f", [13] = "\\r",
}

-- A JSON string literal of `s`, pure ASCII (what Python's json.dumps(ensure_ascii=True)
-- gives): non-ASCII UTF-8 becomes \uXXXX, bytes that are not valid UTF-8 become "?".
local function json_string(s)
  local out = {}
  local i, n = 1, #s
  while i <= n do
    local c = s:byte(i)
    if c == 34 then
      out[#out + 1] = '\\"'
      i = i + 1
    elseif c == 92 then
      out[#out + 1] = "\\\\"
      i = i + 1
    elseif c < 32 or c == 127 then
      out[#out + 1] = JSON_ESCAPES[c] or string.format("\\u%04x", c)
      i = i + 1
    elseif c < 128 then
      out[#out + 1] = string.char(c)
      i = i + 1
    else
      local len, cp
      if c >= 0xC2 and c <= 0xDF then
        len, cp = 2, c - 0xC0
      elseif c >= 0xE0 and c <= 0xEF then
        len, cp = 3, c - 0xE0
      elseif c >= 0xF0 and c <= 0xF4 then
        len, cp = 4, c - 0xF0
      end
      local valid = len ~= nil and i + len - 1 <= n
      if valid then
        for j = i + 1, i + len - 1 do
          local b = s:byte(j)
          if b < 0x80 or b > 0xBF then
            valid = false
            break
          end
          cp = cp * 64 + (b - 0x80)
        end
      end
      if valid and len == 3 and (cp < 0x800 or (cp >= 0xD800 and cp <= 0xDFFF)) then
        valid = false
      end
      if valid and len == 4 and (cp < 0x10000 or cp > 0x10FFFF) then
        valid = false
      end
      if valid then
        if cp < 0x10000 then
          out[#out + 1] = string.format("\\u%04x", cp)
        else
          cp = cp - 0x10000
          out[#out + 1] = string.format("\\u%04x\\u%04x",
            0xD800 + math.floor(cp / 1024), 0xDC00 + cp % 1024)
        end
        i = i + len
      else
        out[#out + 1] = "?"
        i = i + 1
      end
    end
  end
  return '"' .. table.concat(out) .. '"'
end

-- The envelope of a catalogue entry: `ok` first, then `error` {codigo, mensaje, detalle}.
local function envelope(codigo, detalle)
  local entrada = CATALOGO[codigo]
  return '{"ok":false,"error":{"codigo":' .. json_string(codigo)
    .. ',"mensaje":' .. json_string(entrada[2])
    .. ',"detalle":' .. json_string(detalle or "") .. "}}"
end

local function codigo_for_http(status)
  local codigo = BY_HTTP_STATUS[status]
  if codigo ~= nil then
    return codigo
  end
  if status ~= nil and status >= 400 and status < 500 then
    return "solicitud_invalida"
  end
  return "error_interno"
end

-- What the server sent is used only when it has the expected shape.
local function valid_server_error(http_status, body)
  return http_status ~= nil and http_status >= 400 and http_status <= 599
    and body ~= nil
    and string.sub(body, 1, 21) == '{"ok":false,"error":{'
    and string.sub(body, -2) == "}}"
    and not string.find(body, "[^\32-\126]")
end

-- Remove every header (or trailer) not in ALLOWED_HEADERS. Collect first: a header map
-- cannot be modified while iterating it.
local function strip(map)
  local doomed = {}
  for name, _ in pairs(map) do
    if string.sub(name, 1, 1) ~= ":" and not ALLOWED_HEADERS[string.lower(name)] then
      doomed[#doomed + 1] = name
    end
  end
  for _, name in ipairs(doomed) do
    map:remove(name)
  end
end

local function strip_all(map)
  local doomed = {}
  for name, _ in pairs(map) do
    doomed[#doomed + 1] = name
  end
  for _, name in ipairs(doomed) do
    map:remove(name)
  end
end

-- A value this gateway recorded for the request in the stream's dynamic metadata: the
-- key request holds "METHOD /path" (no query string: envoy_on_request), the key detalle
-- the reason request_check.lua refused the request with.
local function recorded(handle, key)
  local metadata = handle:streamInfo():dynamicMetadata():get(METADATA_NAMESPACE)
  if metadata == nil then
    return nil
  end
  return metadata[key]
end

local function request_line(handle)
  return recorded(handle, "request")
end

-- The JSON type each protobuf type of the transcoder's messages stands for.
local PROTO_TYPE_JSON = {
  STRING = "un texto", BYTES = "un texto en base64", BOOL = "un booleano",
  INT32 = "un número entero", INT64 = "un número entero", UINT32 = "un número entero",
  UINT64 = "un número entero", SINT32 = "un número entero", SINT64 = "un número entero",
  FIXED32 = "un número entero", FIXED64 = "un número entero", SFIXED32 = "un número entero",
  SFIXED64 = "un número entero", DOUBLE = "un número", FLOAT = "un número",
  ENUM = "uno de los valores admitidos", MESSAGE = "un objeto",
}

-- The detalle of one of Envoy's own 400 replies. Never Envoy's text itself: the
-- transcoder's reasons quote the body (its JSON parser's errors show the text around a
-- caret, its type errors the value: "fan: invalid value 12345 for type TYPE_STRING").
-- request_check.lua refuses such bodies before the transcoder sees them; this is what a
-- client gets should one still get through: the field's proto name (identifier
-- characters only) and the JSON type it takes, or a fixed sentence.
local function detalle_of_400(reason)
  if reason == "Bad Request" or reason == "" then  -- the HTTP codec's, path normalisation's
    return "la solicitud HTTP está mal formada"
  end
  -- ("codigos[1]: ..." for an element of a list: its index is not the element's position
  -- in the body, so only the field is named.)
  local campo, index, proto_type = string.match(reason,
    "^([%w_]+)(%[?%d*%]?): invalid value .* for type TYPE_(%u+)$")
  if campo ~= nil and PROTO_TYPE_JSON[proto_type] ~= nil then
    local quien = index ~= "" and ": cada elemento debe ser " or ": debe ser "
    return campo .. quien .. PROTO_TYPE_JSON[proto_type]
  end
  campo = string.match(reason, "Starting an object on a scalar field for type ([%w_]+)$")
  if campo ~= nil then
    return campo .. ": no admite un objeto"
  end
  if string.find(reason, "Proto field is not repeating, cannot start list", 1, true) then
    return "cuerpo: un campo de un solo valor recibió una lista"
  end
  if string.find(reason, "Root element must be a message", 1, true) then
    return "cuerpo: debe ser un objeto JSON"
  end
  return "cuerpo: no es JSON válido o no es una solicitud de esta operación"
end

local function empty_trailers_on_http2(handle)
  local protocol = handle:streamInfo():protocol()
  if protocol == "HTTP/1.0" or protocol == "HTTP/1.1" then
    return  -- the HTTP/1 codec drops trailers anyway; waiting for them costs a buffer
  end
  local trailers = handle:trailers()
  if trailers ~= nil then
    strip_all(trailers)
  end
end

-- headers:get() of an absent header returns no value at all (not nil), and
-- tonumber() without an argument raises: always go through a local.
local function header(map, name)
  local value = map:get(name)
  return value
end

local function number_or_nil(text)
  if text == nil then
    return nil
  end
  return tonumber(text)
end

-- grpc-message of grpc's refusal of oversized request metadata, e.g. "received metadata
-- size exceeds soft limit (12653 vs. 8192); ..." or "... exceeds hard limit (...)".
local function metadata_too_large(message)
  return message ~= nil and string.find(message, "metadata size exceeds", 1, true) ~= nil
end

local function on_response(handle)
  local headers = handle:headers()
  local status = number_or_nil(header(headers, ":status"))
  local grpc_status = header(headers, "grpc-status")
  local server_envelope = header(headers, "x-envelope")
  local server_status = number_or_nil(header(headers, "x-http-status"))
  local failed_grpc = grpc_status ~= nil and grpc_status ~= "0"

  -- 3. Success: only the header clean-up.
  if server_envelope == nil and not failed_grpc and status ~= nil
      and status >= 200 and status < 300 then
    strip(headers)
    empty_trailers_on_http2(handle)
    return
  end

  -- Decide the new status and body from the headers alone.
  local new_status, new_body, codigo, detalle_envoy
  local wants_envoy_reason = false
  if server_envelope ~= nil then
    -- 1. The server's error.
    if valid_server_error(server_status, server_envelope) then
      new_status, new_body = server_status, server_envelope
    else
      codigo = "error_interno"
    end
  elseif failed_grpc then
    -- 2a. A gRPC error without envelope: the transcoder already mapped :status for
    -- upstream errors; Envoy's replies to native gRPC requests keep :status 200.
    if status == 200 then
      codigo = BY_GRPC_STATUS[grpc_status] or "error_interno"
    elseif grpc_status == "8" and metadata_too_large(header(headers, "grpc-message")) then
      -- grpc's own RESOURCE_EXHAUSTED for request headers over its metadata limit (the
      -- transcoder makes it a 429): the request is too large, not one call too many.
      codigo = "solicitud_muy_grande"
    elseif grpc_status == "1" then
      -- CANCELLED from the server (the transcoder makes it a 499): grpc turned the call
      -- away without running it (e.g. a worker shutting down), not a bad request.
      codigo = "servicio_no_disponible"
    else
      codigo = codigo_for_http(status)
    end
  else
    -- 2b. Envoy's own reply (or request_check.lua's, or this filter's own CONNECT
    -- refusal): its body is the reason. Shown for client errors, except that a 400 shows
    -- request_check.lua's detalle or a translation (detalle_of_400), never Envoy's text.
    codigo = codigo_for_http(status)
    if status == 501 then
      -- The HTTP/1 codec's answer to a transfer coding it does not implement
      -- ("Transfer-Encoding: gzip, chunked"; its body is just "Not Implemented"): the
      -- client's request is wrong, not a missing operation of ours.
      codigo = "solicitud_invalida"
      detalle_envoy = "Transfer-Encoding no soportado; use chunked o Content-Length."
    end
    wants_envoy_reason = detalle_envoy == nil and CATALOGO[codigo][1] < 500
  end
  if codigo ~= nil then
    new_status = CATALOGO[codigo][1]
  end

  -- Headers first (before body()).
  strip(headers)
  headers:replace(":status", tostring(new_status))
  headers:replace("content-type", "application/json")

  if new_body == nil then
    local detalle = DETALLE_FIJO[codigo] or detalle_envoy
    if detalle == nil then
      if codigo == "ruta_no_encontrada" and request_line(handle) ~= nil then
        detalle = "No existe " .. request_line(handle) .. "."
      elseif wants_envoy_reason then
        local body = handle:body(true)
        local reason = body:getBytes(0, math.min(body:length(), MAX_DETALLE))
        if status == 400 then
          detalle = recorded(handle, "detalle") or detalle_of_400(reason)
        else
          detalle = reason
        end
      else
        detalle = ""
      end
    end
    new_body = envelope(codigo, detalle)
  end
  handle:body(true):setBytes(new_body)
  empty_trailers_on_http2(handle)
end

-- Last resort when on_response failed: a fixed error_interno envelope. Also under pcall.
local function fallback(handle)
  local headers = handle:headers()
  strip(headers)
  headers:replace(":status", "500")
  headers:replace("content-type", "application/json")
  handle:body(true):setBytes(envelope("error_interno", ""))
end

-- The transcoder forwards request headers as gRPC metadata, and gRPC refuses (the whole
-- call fails: a 500) a header it cannot carry: a name outside [0-9a-z_.-], a malformed
-- reserved grpc-* header, a `-bin` value that is not base64 (grpc's own rules: "AB==" is
-- refused too). Worse, such a refusal poisons the header's NAME on Envoy's HTTP/2
-- connection to the server: grpc keeps the error with the HPACK dynamic table entry, and
-- every later call that carries the same name, whatever its value, fails while that
-- entry lives (grpc hpack_parser: a key taken from the table inherits its parse error).
-- Values outside printable ASCII (%x20-%x7E) are not gRPC metadata either (grpc logs an
-- error with the raw value for each call). A client of the JSON API cannot mean any of
-- these for us: drop them before the transcoder. The server reads only authorization and
-- x-request-id, which are printable ASCII when they are valid at all.
local function drop_headers_grpc_cannot_carry(headers)
  local doomed = {}
  for name, value in pairs(headers) do
    local pseudo = string.sub(name, 1, 1) == ":"
    if not pseudo and (string.find(name, "^[0-9a-z_.-]+$") == nil
                       or string.sub(name, 1, 5) == "grpc-"
                       or string.sub(name, -4) == "-bin"
                       or string.find(value, "[^\32-\126]") ~= nil) then
      doomed[#doomed + 1] = name
    end
  end
  for _, name in ipairs(doomed) do
    headers:remove(name)
  end
end

-- Request trailers (an HTTP/2 client can send them; the HTTP/1 codec drops them) reach the
-- server as gRPC metadata just like headers, with the same failures, and a JSON request
-- never needs them: empty them. bodyChunks() lets the body through without buffering it
-- here (the buffer filter behind enforces the limit), so trailers() then waits for nothing.
local function drop_request_trailers(handle, info)
  local protocol = (info or handle:streamInfo()):protocol()
  if protocol == "HTTP/1.0" or protocol == "HTTP/1.1" then
    return
  end
  for _ in handle:bodyChunks() do
  end
  local trailers = handle:trailers()
  if trailers ~= nil then
    strip_all(trailers)
  end
end

-- CONNECT asks for a tunnel (no :path); nothing here serves one, and the buffer filter
-- behind would wait for the end of a body that a tunnel never sends (until Envoy's idle
-- timeout, minutes). Answer at once: envoy_on_response turns the reply into the envelope
-- (its body becomes `detalle`, as for Envoy's own replies). Otherwise drop the headers
-- gRPC cannot carry and remember "METHOD /path" (no query string) for the detalle of a 404
-- (the transcoder rewrites both). Returns the stream info, or nil when refused.
local function on_request(handle)
  local headers = handle:headers()
  local method = header(headers, ":method") or ""
  if method == "CONNECT" then
    handle:respond({[":status"] = "404"}, "No existe CONNECT: la API no abre túneles.")
    return nil
  end
  drop_headers_grpc_cannot_carry(headers)
  local path = header(headers, ":path") or ""
  local query = string.find(path, "?", 1, true)
  if query ~= nil then
    path = string.sub(path, 1, query - 1)
  end
  local info = handle:streamInfo()
  info:dynamicMetadata():set(METADATA_NAMESPACE, "request",
    string.sub(method .. " " .. path, 1, 200))
  return info
end

function envoy_on_request(handle)
  local ok, info = pcall(on_request, handle)
  if ok and info == nil then
    return  -- refused (CONNECT)
  end
  -- Last: it waits for the end of the body (headers are final by then).
  pcall(drop_request_trailers, handle, ok and info or nil)
end

function envoy_on_response(handle)
  local ok, err = pcall(on_response, handle)
  if not ok then
    pcall(function() handle:logErr("envelope.lua: " .. tostring(err)) end)
    pcall(fallback, handle)
  end
end
