"""The schema, as SQLAlchemy Core tables. Alembic migrations (store/migrations) create it;
a test checks that the migrated database matches these tables.

Money is integer cents; points are integers; the balance `fans.puntos` always equals the
sum of the fan's `movimientos` (the append-only ledger) and both change in one
transaction.
"""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Date,
    DateTime,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Numeric,
    PrimaryKeyConstraint,
    Sequence,
    SmallInteger,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY

from loyalty_grpc.domain.keys import Modo
from loyalty_grpc.domain.programs import MONEDA_POR_OMISION
from loyalty_grpc.domain.promos import EstadoCodigo, EstadoFan, EstadoPromo


def _one_of(column: str, values: type[StrEnum]) -> str:
    """A CHECK that `column` holds one of the enum's values (the domain's states)."""
    quoted = ", ".join(f"'{value.value}'" for value in values)
    return f"{column} IN ({quoted})"


metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def _now() -> Column[object]:
    return Column("creado", DateTime(timezone=True), nullable=False, server_default=func.now())


def _numbered(name: str, sequence: str, type_: type[Integer] = BigInteger) -> Column[int]:
    """A surrogate key taking its value from `sequence` (a plain default, not an identity:
    Citus distributes a default; migration 0012). Unique, not a count: on Citus each
    worker hands out numbers of its own range."""
    Sequence(sequence, data_type=type_, metadata=metadata)
    return Column(name, type_, nullable=False, server_default=text(f"nextval('{sequence}')"))


def _of_a_fan() -> ForeignKeyConstraint:
    """The row belongs to a fan of its own program: the program first, as Citus requires
    of a key between tables distributed by program."""
    return ForeignKeyConstraint(["programa_id", "fan_pk"], ["fans.programa_id", "fans.pk"])


programas = Table(
    "programas",
    metadata,
    # The program's natural key, e.g. "halcones".
    Column("id", Text, primary_key=True),
    Column("nombre", Text, nullable=False),
    # Points per peso, exact decimal.
    Column("tasa_puntos", Numeric(12, 6), nullable=False),
    Column("qr_url", Text, nullable=False, server_default=""),
    Column("moneda", Text, nullable=False, server_default=MONEDA_POR_OMISION),
    _now(),
    CheckConstraint("tasa_puntos >= 0", name="tasa_no_negativa"),
)

claves = Table(
    "claves",
    metadata,
    _numbered("id", "claves_id_seq"),
    Column("programa_id", Text, ForeignKey("programas.id"), nullable=False),
    # SHA-256 of the whole key; the key itself is never stored.
    Column("hash", LargeBinary(32), nullable=False, unique=True),
    Column("modo", Text, nullable=False),
    Column("integracion", Text, nullable=False),
    Column("permisos", ARRAY(Text), nullable=False, server_default="{}"),
    # Last four characters, to tell keys apart in listings.
    Column("sufijo", Text, nullable=False),
    _now(),
    Column("revocada", DateTime(timezone=True)),
    PrimaryKeyConstraint("id"),
    CheckConstraint(_one_of("modo", Modo), name="modo"),
)

fans = Table(
    "fans",
    metadata,
    _numbered("pk", "fans_pk_seq"),
    Column("programa_id", Text, ForeignKey("programas.id"), nullable=False),
    # Canonical Fan ID: upper case, no whitespace.
    Column("fan_id", Text, nullable=False),
    Column("nombre", Text, nullable=False),
    Column("correo", Text, nullable=False),
    Column("socio_desde", Integer, nullable=False),
    Column("temporadas", Integer, nullable=False, server_default="0"),
    Column("qr_token", Text, nullable=False),
    # Balance cache; always the sum of the fan's movimientos.
    Column("puntos", BigInteger, nullable=False, server_default="0"),
    # Bumped by the trigger fans_cambio whenever `puntos` changes (migration 0016): for one
    # fan, the order of its balance changes on any node and across shard moves. The
    # wallet sender compares it to tell the newer balance (wallet_outbox.version).
    Column("saldo_version", BigInteger, nullable=False, server_default=text("0")),
    Column("estado", Text, nullable=False, server_default=EstadoFan.ACTIVO.value),
    Column("baja_en", DateTime(timezone=True)),
    Column("baja_motivo", Text),
    _now(),
    # Roster feed: when and in which transaction an entry field last changed (or the row
    # was inserted). Maintained by the trigger fans_cambio (migrations 0001, 0012, 0020),
    # which runs where the row is written (on Citus, the worker), so that the xid is the
    # one that node's roster page compares with. The feed orders changes by
    # (cambio_xid, pk) and serves only those below the oldest running transaction
    # (services/pos/roster.py, store/roster.py).
    Column("actualizado", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column(
        "cambio_xid",
        BigInteger,
        nullable=False,
        server_default=text("pg_current_xact_id()::text::bigint"),
    ),
    PrimaryKeyConstraint("programa_id", "pk"),
    CheckConstraint(_one_of("estado", EstadoFan), name="estado"),
    CheckConstraint("(estado = 'baja') = (baja_en IS NOT NULL)", name="baja_en"),
    CheckConstraint(
        "fan_id = upper(fan_id) AND fan_id !~ '\\s' AND fan_id <> ''", name="fan_id_canonico"
    ),
    Index("uq_fans_programa_fan_id", "programa_id", "fan_id", unique=True),
    # One e-mail per fan of a program, compared with ASCII letters case-insensitive and
    # every other character exactly (domain.fans.email_key): `COLLATE "C"` makes lower()
    # fold A-Z only, whatever the database's collation (under a UTF-8 one it also folds
    # the Kelvin sign into `k`). The resolve by e-mail reads this index (store/fan_lookup).
    Index(
        "uq_fans_programa_correo",
        "programa_id",
        func.lower(text('correo COLLATE "C"')),
        unique=True,
    ),
    Index("uq_fans_programa_qr_token", "programa_id", "qr_token", unique=True),
    # Roster feed: a page of changes, a snapshot page (each one index range scan).
    Index("ix_fans_programa_cambio_xid", "programa_id", "cambio_xid", "pk"),
)

promos = Table(
    "promos",
    metadata,
    # The promotion's id in the contract (int32). Created only by the back office, through
    # the coordinator on Citus (a worker cannot hand out `integer` sequence values).
    _numbered("id", "promos_id_seq", Integer),
    Column("programa_id", Text, ForeignKey("programas.id"), nullable=False),
    Column("nombre", Text, nullable=False),
    Column("descripcion", Text, nullable=False, server_default=""),
    Column("estado", Text, nullable=False, server_default=EstadoPromo.ACTIVA.value),
    Column("vigencia_fin", Date, nullable=False),
    # What a live redemption of one of its codes credits to the code's fan.
    Column("puntos_canje", Integer, nullable=False, server_default="0"),
    _now(),
    PrimaryKeyConstraint("programa_id", "id"),
    CheckConstraint(_one_of("estado", EstadoPromo), name="estado"),
    CheckConstraint("puntos_canje >= 0", name="puntos_canje"),
    Index("uq_promos_programa_nombre", "programa_id", func.lower(text("nombre")), unique=True),
)

codigos = Table(
    "codigos",
    metadata,
    _numbered("id", "codigos_id_seq"),
    Column("promo_id", Integer, nullable=False),
    # Denormalised from the promotion: redeem and resolve look codes up by program.
    Column("programa_id", Text, ForeignKey("programas.id"), nullable=False),
    # Upper case, trimmed.
    Column("codigo", Text, nullable=False),
    Column("estado", Text, nullable=False, server_default=EstadoCodigo.DISPONIBLE.value),
    # The fan the code was delivered to (asignado, canjeado, and liberado after delivery).
    Column("fan_pk", BigInteger),
    Column("asignado_en", DateTime(timezone=True)),
    # The redemption: the POS's time (`ts`, or the server's when absent), its terminal, the
    # key that redeemed it (a test key redeems too) and when the server recorded it.
    Column("canjeado_en", DateTime(timezone=True)),
    Column("canje_terminal", Text),
    Column("canje_clave_id", BigInteger, ForeignKey("claves.id")),
    Column("canje_registrado", DateTime(timezone=True)),
    Column("liberado_en", DateTime(timezone=True)),
    _now(),
    PrimaryKeyConstraint("programa_id", "id"),
    ForeignKeyConstraint(["programa_id", "promo_id"], ["promos.programa_id", "promos.id"]),
    _of_a_fan(),
    CheckConstraint(_one_of("estado", EstadoCodigo), name="estado"),
    CheckConstraint(
        "estado NOT IN ('asignado', 'canjeado') OR fan_pk IS NOT NULL", name="fan_si_entregado"
    ),
    # The deposit's `ON CONFLICT` target: a code is deposited once per promotion.
    Index(
        "uq_codigos_programa_id_promo_id_codigo", "programa_id", "promo_id", "codigo", unique=True
    ),
    Index("ix_codigos_programa_codigo", "programa_id", "codigo"),
    Index("ix_codigos_programa_id_fan_pk", "programa_id", "fan_pk"),
    # Inventory counts per promotion and state (GET /api/v1/promos).
    Index("ix_codigos_programa_id_promo_id_estado", "programa_id", "promo_id", "estado"),
)

ventas = Table(
    "ventas",
    metadata,
    # The folio (`tx`, an int32 JSON number), unique across programs: the sale passes it,
    # taken from `ventas_folio_seq` in blocks (store/folios.py); the default serves SQL
    # that names no folio (migration 0020), never this version's.
    Column(
        "id",
        Integer,
        nullable=False,
        autoincrement=False,
        server_default=text("nextval('ventas_folio_seq')"),
    ),
    Column("programa_id", Text, ForeignKey("programas.id"), nullable=False),
    # Test sales live in their own idempotency namespace.
    Column("modo", Text, nullable=False),
    Column("id_externo", Text, nullable=False),
    Column("fan_pk", BigInteger, nullable=False),
    Column("importe_centavos", BigInteger, nullable=False),
    Column("moneda", Text, nullable=False),
    Column("terminal", Text),
    Column("sitio", Text),
    Column("ts", DateTime(timezone=True), nullable=False),
    Column("puntos", BigInteger, nullable=False),
    Column("clave_id", BigInteger, ForeignKey("claves.id"), nullable=False),
    _now(),
    Column("anulada_en", DateTime(timezone=True)),
    PrimaryKeyConstraint("programa_id", "id"),
    _of_a_fan(),
    CheckConstraint(_one_of("modo", Modo), name="modo"),
    CheckConstraint("importe_centavos >= 0", name="importe"),
    Index("uq_ventas_programa_modo_id_externo", "programa_id", "modo", "id_externo", unique=True),
)

# The folio source (migration 0012): the sale takes its folios from it in blocks
# (store/folios.py); `integer`, as `tx` is.
folio_sequence = Sequence("ventas_folio_seq", data_type=Integer, metadata=metadata)

movimientos = Table(
    "movimientos",
    metadata,
    _numbered("id", "movimientos_id_seq"),
    # The fan's program (migration 0012): every program table is keyed by it.
    Column("programa_id", Text, nullable=False),
    Column("fan_pk", BigInteger, nullable=False),
    Column("puntos", BigInteger, nullable=False),
    # venta, canje, ajuste, anulacion.
    Column("motivo", Text, nullable=False),
    Column("venta_id", Integer),
    Column("codigo_id", BigInteger),
    Column("nota", Text, nullable=False, server_default=""),
    _now(),
    PrimaryKeyConstraint("programa_id", "id"),
    _of_a_fan(),
    ForeignKeyConstraint(["programa_id", "venta_id"], ["ventas.programa_id", "ventas.id"]),
    ForeignKeyConstraint(["programa_id", "codigo_id"], ["codigos.programa_id", "codigos.id"]),
    CheckConstraint("motivo IN ('venta', 'canje', 'ajuste', 'anulacion')", name="motivo"),
    Index("ix_movimientos_programa_id_fan_pk_id", "programa_id", "fan_pk", "id"),
)

# Wallet pass (DESIGN.md §2): every balance change appends the fan's new balance here, in
# the transaction of the change (store/ledger.move_points). Balance changes only INSERT here
# (no row a sender locks), so a sale never waits for the sender. The sender
# (loyalty_grpc.wallet.outbox) takes each program's oldest rows by its key (programa_id,
# id) (FOR UPDATE SKIP LOCKED) and folds the latest balance per fan into wallet_pases
# (migration 0016's loyalty_wallet_turno). `ix_wallet_outbox_id` serves the previous
# version's sender, which takes every program's oldest rows at once (a contract revision
# drops it): until then a sale writes two index entries here.
# Autovacuum runs after every 10,000 deleted rows: until it has, a scan for the oldest ids
# steps over the index entries of rows already taken.
wallet_outbox = Table(
    "wallet_outbox",
    metadata,
    _numbered("id", "wallet_outbox_id_seq"),
    Column("programa_id", Text, nullable=False),
    Column("fan_pk", BigInteger, nullable=False),
    Column("saldo", BigInteger, nullable=False),
    _now(),
    # The fan's `saldo_version` after the change: given by the ledger rule's functions
    # (from their balance UPDATE, migration 0017), else filled by the trigger
    # wallet_outbox_version (migration 0016: the previous version's writers, SQL written
    # for the schema before 0012); NULL in rows written before 0016 (counted as 0).
    Column("version", BigInteger),
    PrimaryKeyConstraint("programa_id", "id"),
    _of_a_fan(),
    Index("ix_wallet_outbox_id", "id"),
    postgresql_with={"autovacuum_vacuum_scale_factor": "0", "autovacuum_vacuum_threshold": "10000"},
)

# The sender's state per fan, created when the fan's first balance is folded in; locked
# only by senders, never by a sale. `saldo_pendiente` is the balance waiting to be
# delivered (NULL: nothing waits), `saldo_id` the wallet_outbox id it came from (kept after
# delivery: a fold only ever replaces it with a newer one), `pendiente_desde` when the
# oldest balance still waiting was written. `proximo_intento` is both the claim lease
# (while a delivery runs) and the retry back-off (after a failure); a fan with a balance
# waiting is due when it has passed. A claim is one range scan of
# ix_wallet_pases_programa_due (ix_wallet_pases_due: the previous version's, until a contract).
# The partial indexes name `pendiente_desde`, not `saldo_pendiente`: folding a newer
# balance into one already waiting changes no indexed column, so PostgreSQL can make it a
# HOT update (no index entries), for which fillfactor 80 leaves room on the page.
wallet_pases = Table(
    "wallet_pases",
    metadata,
    Column("programa_id", Text, nullable=False),
    Column("fan_pk", BigInteger, nullable=False),
    # Consecutive failed attempts (0 after a delivery).
    Column("intentos", Integer, nullable=False, server_default="0"),
    Column("proximo_intento", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("ultimo_error", Text),
    Column("error_en", DateTime(timezone=True)),
    Column("entregado_saldo", BigInteger),
    Column("entregado_en", DateTime(timezone=True)),
    Column("saldo_pendiente", BigInteger),
    Column("saldo_id", BigInteger),
    # The version of `saldo_pendiente` (wallet_outbox.version; NULL: before 0016, as 0).
    Column("saldo_version", BigInteger),
    Column("pendiente_desde", DateTime(timezone=True)),
    PrimaryKeyConstraint("programa_id", "fan_pk"),
    _of_a_fan(),
    CheckConstraint("intentos >= 0", name="intentos"),
    CheckConstraint(
        "(saldo_pendiente IS NULL) = (pendiente_desde IS NULL) "
        "AND (saldo_pendiente IS NULL OR saldo_id IS NOT NULL)",
        name="pendiente",
    ),
    # The claim: due fans with a balance waiting, longest-waiting first.
    Index(
        "ix_wallet_pases_due",
        "proximo_intento",
        "pendiente_desde",
        postgresql_where=text("pendiente_desde IS NOT NULL"),
    ),
    # One program's claim (the sender runs by program, migration 0016).
    Index(
        "ix_wallet_pases_programa_due",
        "programa_id",
        "proximo_intento",
        "pendiente_desde",
        postgresql_where=text("pendiente_desde IS NOT NULL"),
    ),
    # The backlog's oldest balance (`loyalty status`, /metrics).
    Index(
        "ix_wallet_pases_pendiente_desde",
        "pendiente_desde",
        postgresql_where=text("pendiente_desde IS NOT NULL"),
    ),
    postgresql_with={
        "fillfactor": "80",
        "autovacuum_vacuum_scale_factor": "0",
        "autovacuum_vacuum_threshold": "10000",
    },
)

# What the local provider (the default) records: one row per delivery.
wallet_entregas = Table(
    "wallet_entregas",
    metadata,
    _numbered("id", "wallet_entregas_id_seq"),
    Column("programa_id", Text, nullable=False),
    Column("fan_pk", BigInteger, nullable=False),
    Column("saldo", BigInteger, nullable=False),
    Column("proveedor", Text, nullable=False),
    Column("entregado", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("programa_id", "id"),
    _of_a_fan(),
    Index("ix_wallet_entregas_programa_id_fan_pk_id", "programa_id", "fan_pk", "id"),
)

# The per-key call limit (domain/rate_limit.py, store/rate_limit.py): one row per key,
# updated by one call of loyalty_limit_reserve per batch of calls a process reserves
# (services/rate_limit.py), so the row lock serialises a key's requests across every
# process and host sharing the database. UNLOGGED: no WAL per
# call; after a crash the table is empty, i.e. every key gets a fresh minute. No index
# besides the primary key, so the update stays HOT. Rows idle for a minute are
# deleted now and then (services/rate_limit.py), so the table holds the keys in use.
limite_llamadas = Table(
    "limite_llamadas",
    metadata,
    # The key's program and id. No foreign key to `claves`: keys are revoked, never
    # deleted, and on Citus this UNLOGGED table has a colocation group of its own.
    Column("programa_id", Text, primary_key=True),
    Column("clave_id", BigInteger, primary_key=True),
    # Newest whole second (database clock, epoch seconds) a call of the key was seen in.
    Column("segundo", BigInteger, nullable=False),
    # 61 counters of granted calls, oldest first; the last one is `segundo`.
    Column("cuentas", ARRAY(Integer), nullable=False),
    # Calls granted to the last request (what the statement's RETURNING reports).
    Column("concedidas", Integer, nullable=False),
    # 5 counters of spare calls granted and not settled yet, over all processes, oldest
    # first, aligned with `cuentas` (the last one is `segundo`). The default serves a
    # process of the previous version inserting a row during a rolling upgrade.
    Column("reservas", ARRAY(Integer), nullable=False, server_default="{0,0,0,0,0}"),
    prefixes=["UNLOGGED"],
)

# Roster cursors this database issued (store/roster_cursors.py; docs/roster.md "Cursors
# across a failover or a restore"): one row per distinct `siguiente` handed out, written
# before the page is answered, so that a copy of the database holds a cursor's row only
# if it holds every change the cursor passed. `sistema` is the issuing cluster's
# system_identifier (as PostgreSQL shows it: a signed bigint). `programa_id` leads the
# primary key (tables are to be distributed by program); no foreign key: it would lock the
# program's row for every page, and the row is only ever looked up by its whole key.
roster_cursores = Table(
    "roster_cursores",
    metadata,
    Column("programa_id", Text, primary_key=True),
    Column("sistema", BigInteger, primary_key=True),
    Column("fase", SmallInteger, primary_key=True),
    Column("xid", BigInteger, primary_key=True),
    Column("pk", BigInteger, primary_key=True),
)

# The request ids of back-office writes (domain/requests.py, store/requests.py): the
# request's SHA-256 and the answer given, kept so that a retry is answered again. The program
# leads the primary key (tables are to be distributed by program); no foreign key, as
# roster_cursores. `respuesta` is NULL only inside the transaction that claimed the id.
peticiones = Table(
    "peticiones",
    metadata,
    Column("programa_id", Text, primary_key=True),
    Column("metodo", Text, primary_key=True),
    Column("request_id", Text, primary_key=True),
    Column("huella", LargeBinary, nullable=False),
    Column("respuesta", LargeBinary),
    Column("creada", DateTime(timezone=True), nullable=False, server_default=func.now()),
)

# Balance sanity: `puntos_ok` compares cache and ledger (used by tests and `loyalty status`).
LEDGER_MISMATCH_SQL = """
SELECT f.pk FROM fans f
LEFT JOIN (
  SELECT programa_id, fan_pk, sum(puntos) AS s FROM movimientos GROUP BY programa_id, fan_pk
) m ON m.programa_id = f.programa_id AND m.fan_pk = f.pk
WHERE f.puntos <> coalesce(m.s, 0)
"""

__all__ = [
    "claves",
    "codigos",
    "fans",
    "folio_sequence",
    "limite_llamadas",
    "metadata",
    "movimientos",
    "peticiones",
    "programas",
    "promos",
    "roster_cursores",
    "ventas",
    "wallet_entregas",
    "wallet_outbox",
    "wallet_pases",
]
