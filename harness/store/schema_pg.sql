-- AutoTuneBench results store, PostgreSQL dialect (15+). Schema version 3: atb_schema_version().
-- Version 3 adds measurements.round_lengths_json (a version-2 database is upgraded on open by
-- harness/store/_postgres.py: ADD COLUMN, then this file re-run; rows and hashes are kept).
--
-- The port of harness/store/schema.sql: the same tables and columns, and every rule as a CHECK
-- constraint or a PL/pgSQL trigger raising 'atb_rule:<rule_name>: <what is wrong>' with SQLite's rule
-- names, so harness/store/_postgres.py maps refusals to IngestRejected(rule=...) exactly as the SQLite
-- store does, and tests/test_store_conformance.py runs one raw-SQL suite against both.
--
-- Types: SQLite INTEGER is BIGINT here, REAL is DOUBLE PRECISION, TEXT is TEXT; JSON columns stay TEXT
-- (the hash chain hashes the text as written) and are parsed with jsonb where a rule needs to look in.
-- SQLite's json_valid is strict RFC 8259, as is PostgreSQL's jsonb input.
--
-- Generated per table by harness/store/_pg_schema.py (the same set SQLite generates, plus what a
-- server needs); PostgreSQL fires a table's triggers of one kind in name order, hence the prefixes:
--   atb1_fill_id          an INTEGER PRIMARY KEY left out by a raw INSERT gets the next id (SQLite's rowid)
--   atb2_chain            takes the store's write lock; duplicate_key (a row with this primary or UNIQUE
--                         key is stored: refuses INSERT ... ON CONFLICT DO UPDATE/NOTHING, which fire
--                         BEFORE INSERT triggers first), chain_order (chain_seq = 1 + the largest stored)
--   atb3_protocol_stamp   missing_protocol_digest, unknown_protocol_digest      (tables with protocol_sha256)
--   atb4_rules            the table's own rules, below                          (where the table has some)
--   atb5_no_update        append_only (UPDATE, so also the DO UPDATE arm of an upsert)
--   atb5_no_delete        append_only
--   atb5_no_truncate      append_only (TRUNCATE skips row triggers, so it needs its own statement trigger)
-- The write lock is pg_advisory_xact_lock(CHAIN_LOCK): every writer takes it before reading the chain
-- head, so concurrent writers append in one order and none is lost or duplicated.
--
-- What no schema stops: the owner of the database can ALTER TABLE ... DISABLE TRIGGER or DROP it. The
-- store checks on open that every rule trigger is present and enabled and every rule function's body is
-- this file's (harness/store/_pg_schema.py), and the hash chain makes an edited or deleted row visible
-- to `verify()`, which also replays every row through SQLite's rules.

CREATE OR REPLACE FUNCTION atb_schema_version() RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT 3 $$;

-- The text as jsonb, or NULL when it is not valid JSON (SQLite: json_valid).
CREATE OR REPLACE FUNCTION atb_jsonb(t text) RETURNS jsonb LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN t::jsonb;
EXCEPTION WHEN others THEN
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION atb_json_valid(t text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN t IS NULL THEN NULL ELSE atb_jsonb(t) IS NOT NULL END
$$;

-- SQLite's json_extract(text, '$.a.b') for the readers' queries (harness/tuning/campaigns/_store.py): a string
-- comes back unquoted, an object or array as JSON text, JSON null as NULL. Unlike SQLite a number also
-- comes back as text (a function has one return type): compare it after a cast.
CREATE OR REPLACE FUNCTION json_extract(t text, p text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE jsonb_typeof(v) WHEN 'string' THEN v #>> '{}' WHEN 'null' THEN NULL ELSE v::text END
    FROM (SELECT atb_jsonb(t) #> string_to_array(substr(p, 3), '.') AS v) AS s
$$;

CREATE TABLE IF NOT EXISTS protocols (
    sha256 TEXT PRIMARY KEY CHECK (length(sha256) = 64),
    version TEXT NOT NULL UNIQUE CHECK (length(version) > 0),
    paired_seeds_required BIGINT NOT NULL CHECK (paired_seeds_required > 0),
    registered_at TEXT NOT NULL,
    chain_seq BIGINT NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (row_hash ~ '^[0-9a-f]{64}$')
);

CREATE TABLE IF NOT EXISTS expected_gates (
    protocol_sha256 TEXT NOT NULL REFERENCES protocols(sha256),
    kind TEXT NOT NULL CHECK (kind IN ('kernel', 'engine')),
    name TEXT NOT NULL CHECK (length(name) > 0),
    required BIGINT NOT NULL CHECK (required IN (0, 1)),
    created_at TEXT NOT NULL,
    chain_seq BIGINT NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (row_hash ~ '^[0-9a-f]{64}$'),
    PRIMARY KEY (protocol_sha256, kind, name)
);

CREATE TABLE IF NOT EXISTS devices (
    sha256 TEXT PRIMARY KEY CHECK (length(sha256) = 64),
    backend TEXT NOT NULL CHECK (backend IN ('cpu', 'cuda', 'mlx')),
    fingerprint_json TEXT NOT NULL CHECK (atb_json_valid(fingerprint_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq BIGINT NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (row_hash ~ '^[0-9a-f]{64}$')
);

CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    device_sha256 TEXT NOT NULL REFERENCES devices(sha256),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    started_at TEXT NOT NULL,
    note TEXT NOT NULL DEFAULT '',
    chain_seq BIGINT NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (row_hash ~ '^[0-9a-f]{64}$')
);

CREATE TABLE IF NOT EXISTS ceilings (
    session_id TEXT PRIMARY KEY REFERENCES sessions(id),
    device_sha256 TEXT NOT NULL REFERENCES devices(sha256),
    bytes_per_s DOUBLE PRECISION NOT NULL CHECK (bytes_per_s > 0),
    flops_per_s DOUBLE PRECISION NOT NULL CHECK (flops_per_s > 0),
    method TEXT NOT NULL,
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq BIGINT NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (row_hash ~ '^[0-9a-f]{64}$')
);

CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('kernel', 'engine')),
    source_sha256 TEXT NOT NULL,
    metadata_json TEXT NOT NULL DEFAULT '{}' CHECK (atb_json_valid(metadata_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq BIGINT NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (row_hash ~ '^[0-9a-f]{64}$')
);

CREATE TABLE IF NOT EXISTS candidates (
    sha256 TEXT PRIMARY KEY CHECK (length(sha256) = 64),
    kind TEXT NOT NULL CHECK (kind IN ('kernel', 'engine')),
    content TEXT NOT NULL,
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq BIGINT NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (row_hash ~ '^[0-9a-f]{64}$')
);

CREATE TABLE IF NOT EXISTS measurement_sets (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    device_sha256 TEXT NOT NULL REFERENCES devices(sha256),
    task_id TEXT NOT NULL,
    subject_sha256 TEXT NOT NULL,
    arm TEXT NOT NULL CHECK (arm IN ('candidate', 'baseline')),
    kind TEXT NOT NULL CHECK (kind IN ('kernel', 'engine')),
    unit TEXT NOT NULL CHECK (unit IN ('ns', 'requests_per_s')),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq BIGINT NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (row_hash ~ '^[0-9a-f]{64}$')
);

CREATE TABLE IF NOT EXISTS measurements (
    id BIGINT PRIMARY KEY,
    set_id TEXT NOT NULL REFERENCES measurement_sets(id),
    seed BIGINT NOT NULL,
    samples_json TEXT NOT NULL CHECK (atb_json_valid(samples_json) AND jsonb_typeof(atb_jsonb(samples_json)) = 'array'
                                      AND jsonb_array_length(atb_jsonb(samples_json)) > 0),
    -- Round boundaries (schema 3; what and why: schema.sql). NULL: stored without them.
    round_lengths_json TEXT CHECK (round_lengths_json IS NULL OR (atb_json_valid(round_lengths_json)
                                   AND jsonb_typeof(atb_jsonb(round_lengths_json)) = 'array'
                                   AND jsonb_array_length(atb_jsonb(round_lengths_json)) > 0)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    chain_seq BIGINT NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (row_hash ~ '^[0-9a-f]{64}$'),
    UNIQUE (set_id, seed)
);

CREATE TABLE IF NOT EXISTS verdicts (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    device_sha256 TEXT NOT NULL REFERENCES devices(sha256),
    task_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('kernel', 'engine')),
    candidate_sha256 TEXT NOT NULL,
    baseline_sha256 TEXT NOT NULL,
    baseline_label TEXT NOT NULL CHECK (length(baseline_label) > 0),
    status TEXT NOT NULL CHECK (status IN ('accepted', 'rejected', 'quarantined')),
    correct BIGINT NOT NULL CHECK (correct IN (0, 1)),
    reason TEXT NOT NULL DEFAULT '',
    ratio DOUBLE PRECISION CHECK (ratio IS NULL OR ratio > 0),
    ci_low DOUBLE PRECISION,
    ci_high DOUBLE PRECISION,
    candidate_set_id TEXT REFERENCES measurement_sets(id),
    baseline_set_id TEXT REFERENCES measurement_sets(id),
    gates_json TEXT,
    detail_json TEXT NOT NULL DEFAULT '{}' CHECK (atb_json_valid(detail_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq BIGINT NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (row_hash ~ '^[0-9a-f]{64}$')
);

CREATE TABLE IF NOT EXISTS quarantine_reviews (
    id BIGINT PRIMARY KEY,
    verdict_id TEXT NOT NULL REFERENCES verdicts(id),
    cleared BIGINT NOT NULL CHECK (cleared IN (0, 1)),
    reason TEXT NOT NULL CHECK (length(reason) > 0),
    extended_verdict_id TEXT REFERENCES verdicts(id),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq BIGINT NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (row_hash ~ '^[0-9a-f]{64}$')
);

CREATE TABLE IF NOT EXISTS preregistrations (
    id TEXT PRIMARY KEY,
    spec_sha256 TEXT NOT NULL UNIQUE CHECK (length(spec_sha256) = 64),
    spec_json TEXT NOT NULL CHECK (atb_json_valid(spec_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq BIGINT NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (row_hash ~ '^[0-9a-f]{64}$')
);

CREATE TABLE IF NOT EXISTS campaigns (
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('kernel', 'engine')),
    tuner_spec TEXT NOT NULL,
    seed BIGINT NOT NULL,
    budget BIGINT NOT NULL CHECK (budget > 0),
    session_id TEXT NOT NULL REFERENCES sessions(id),
    device_sha256 TEXT NOT NULL REFERENCES devices(sha256),
    preregistration_id TEXT REFERENCES preregistrations(id),
    arm TEXT,
    config_json TEXT NOT NULL DEFAULT '{}' CHECK (atb_json_valid(config_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq BIGINT NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (row_hash ~ '^[0-9a-f]{64}$'),
    CHECK ((preregistration_id IS NULL) = (arm IS NULL))
);

CREATE TABLE IF NOT EXISTS iterations (
    id BIGINT PRIMARY KEY,
    campaign_id TEXT NOT NULL REFERENCES campaigns(id),
    idx BIGINT NOT NULL CHECK (idx >= 0),
    candidate_sha256 TEXT,
    verdict_id TEXT REFERENCES verdicts(id),
    usable BIGINT NOT NULL CHECK (usable IN (0, 1)),
    unusable_reason TEXT NOT NULL DEFAULT '',
    tokens_in BIGINT NOT NULL DEFAULT 0,
    tokens_out BIGINT NOT NULL DEFAULT 0,
    cost_usd DOUBLE PRECISION NOT NULL DEFAULT 0,
    model_calls BIGINT NOT NULL DEFAULT 0,
    truncated_calls BIGINT NOT NULL DEFAULT 0,
    detail_json TEXT NOT NULL DEFAULT '{}' CHECK (atb_json_valid(detail_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq BIGINT NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (row_hash ~ '^[0-9a-f]{64}$'),
    UNIQUE (campaign_id, idx),
    CHECK (usable = 0 OR verdict_id IS NOT NULL),
    CHECK (usable = 1 OR length(unusable_reason) > 0)
);

CREATE TABLE IF NOT EXISTS campaign_outcomes (
    campaign_id TEXT PRIMARY KEY REFERENCES campaigns(id),
    status TEXT NOT NULL CHECK (status IN ('completed', 'infrastructure_defect', 'aborted')),
    truncated_fraction DOUBLE PRECISION NOT NULL DEFAULT 0,
    reason TEXT NOT NULL DEFAULT '',
    detail_json TEXT NOT NULL DEFAULT '{}' CHECK (atb_json_valid(detail_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq BIGINT NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (row_hash ~ '^[0-9a-f]{64}$'),
    CHECK (status = 'completed' OR length(reason) > 0)
);

CREATE TABLE IF NOT EXISTS reports (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    body_json TEXT NOT NULL CHECK (atb_json_valid(body_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq BIGINT NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (row_hash ~ '^[0-9a-f]{64}$')
);

-- Lookups the rules make on every insert (as in schema.sql), and the ones the sweep's progress polls.
CREATE INDEX IF NOT EXISTS verdicts_candidate_set ON verdicts (candidate_set_id);
CREATE INDEX IF NOT EXISTS verdicts_baseline_set ON verdicts (baseline_set_id);
CREATE INDEX IF NOT EXISTS quarantine_reviews_verdict ON quarantine_reviews (verdict_id);
CREATE INDEX IF NOT EXISTS iterations_verdict ON iterations (verdict_id);
CREATE INDEX IF NOT EXISTS reports_kind_subject ON reports (kind, subject);

-- ---------------------------------------------------------------- rule functions (atb4_rules)
-- A gate list's elements (SQLite: json_each(gates_json)); NULL/invalid/non-array gives no rows.
CREATE OR REPLACE FUNCTION atb_gates(t text) RETURNS SETOF jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT e FROM jsonb_array_elements(CASE WHEN jsonb_typeof(atb_jsonb(t)) = 'array' THEN atb_jsonb(t) END) AS e
$$;

CREATE OR REPLACE FUNCTION atb_rules_verdicts() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    g jsonb := atb_jsonb(NEW.gates_json);
    cs measurement_sets%ROWTYPE;
    bs measurement_sets%ROWTYPE;
    lo double precision;
    hi double precision;
BEGIN
    IF NEW.gates_json IS NULL OR g IS NULL OR jsonb_typeof(g) <> 'array' OR jsonb_array_length(g) = 0 THEN
        RAISE EXCEPTION 'atb_rule:verdict_without_gate_results: a verdict must carry a non-empty JSON array of gate results';
    END IF;
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(g) AS e
               WHERE jsonb_typeof(e -> 'name') IS DISTINCT FROM 'string'
                  OR jsonb_typeof(e -> 'passed') IS DISTINCT FROM 'boolean') THEN
        RAISE EXCEPTION 'atb_rule:malformed_gate_result: every gate result needs a name and a boolean passed';
    END IF;
    IF NEW.status = 'accepted' AND EXISTS (SELECT 1 FROM jsonb_array_elements(g) AS e
                                           WHERE (e -> 'passed') IS DISTINCT FROM 'true'::jsonb) THEN
        RAISE EXCEPTION 'atb_rule:accepted_with_failed_gate: an accepted verdict needs every gate passed';
    END IF;
    IF NEW.status = 'accepted' AND NEW.correct <> 1 THEN
        RAISE EXCEPTION 'atb_rule:accepted_but_incorrect: an accepted verdict must be correct';
    END IF;
    IF NEW.status = 'quarantined' AND length(NEW.reason) = 0 THEN
        RAISE EXCEPTION 'atb_rule:quarantine_without_reason: a quarantined verdict must store its reason';
    END IF;
    IF NEW.ratio IS NOT NULL AND (NEW.candidate_set_id IS NULL OR NEW.baseline_set_id IS NULL) THEN
        RAISE EXCEPTION 'atb_rule:ratio_without_measurements: a ratio needs a candidate and a baseline measurement set';
    END IF;
    IF NEW.status IN ('accepted', 'quarantined') AND NEW.ratio IS NULL THEN
        RAISE EXCEPTION 'atb_rule:verdict_without_ratio: accepted and quarantined verdicts need a measured ratio';
    END IF;
    IF NEW.ratio IS NOT NULL AND (NEW.ci_low IS NULL OR NEW.ci_high IS NULL
                                  OR NEW.ci_low > NEW.ratio OR NEW.ci_high < NEW.ratio) THEN
        RAISE EXCEPTION 'atb_rule:ratio_outside_interval: the ratio must lie within its confidence interval';
    END IF;
    SELECT * INTO cs FROM measurement_sets WHERE id = NEW.candidate_set_id;
    SELECT * INTO bs FROM measurement_sets WHERE id = NEW.baseline_set_id;
    IF (NEW.candidate_set_id IS NOT NULL AND cs.id IS NULL) OR (NEW.baseline_set_id IS NOT NULL AND bs.id IS NULL) THEN
        RAISE EXCEPTION 'atb_rule:measurement_set_missing: a referenced measurement set does not exist';
    END IF;
    IF (NEW.candidate_set_id IS NOT NULL AND cs.arm <> 'candidate')
       OR (NEW.baseline_set_id IS NOT NULL AND bs.arm <> 'baseline') THEN
        RAISE EXCEPTION 'atb_rule:arm_mismatch: candidate_set_id must name a candidate arm and baseline_set_id a baseline arm';
    END IF;
    IF NEW.candidate_set_id IS NOT NULL AND NEW.baseline_set_id IS NOT NULL THEN
        IF cs.device_sha256 <> bs.device_sha256 OR cs.device_sha256 <> NEW.device_sha256 THEN
            RAISE EXCEPTION 'atb_rule:cross_device_ratio: candidate and baseline were measured on different device fingerprints';
        END IF;
        IF cs.session_id <> bs.session_id OR cs.session_id <> NEW.session_id THEN
            RAISE EXCEPTION 'atb_rule:cross_session_ratio: candidate and baseline were measured in different measurement sessions';
        END IF;
        IF cs.task_id <> bs.task_id OR cs.task_id <> NEW.task_id THEN
            RAISE EXCEPTION 'atb_rule:cross_task_ratio: candidate and baseline measure different tasks';
        END IF;
        IF EXISTS (SELECT seed FROM measurements WHERE set_id = NEW.candidate_set_id
                   EXCEPT SELECT seed FROM measurements WHERE set_id = NEW.baseline_set_id)
           OR EXISTS (SELECT seed FROM measurements WHERE set_id = NEW.baseline_set_id
                      EXCEPT SELECT seed FROM measurements WHERE set_id = NEW.candidate_set_id) THEN
            RAISE EXCEPTION 'atb_rule:unpaired_seeds: candidate and baseline measurements do not share the same seed set';
        END IF;
    END IF;
    IF NEW.candidate_set_id IS NOT NULL
       AND (SELECT count(DISTINCT seed) FROM measurements WHERE set_id = NEW.candidate_set_id)
         < (SELECT paired_seeds_required FROM protocols WHERE sha256 = NEW.protocol_sha256) THEN
        RAISE EXCEPTION 'atb_rule:too_few_paired_seeds: fewer paired seeds than the protocol requires';
    END IF;
    IF NEW.candidate_set_id IS NOT NULL AND NEW.baseline_set_id IS NOT NULL
       AND (cs.protocol_sha256 IS DISTINCT FROM NEW.protocol_sha256 OR bs.protocol_sha256 IS DISTINCT FROM NEW.protocol_sha256) THEN
        RAISE EXCEPTION 'atb_rule:protocol_mismatch: measurements and verdict were made under different protocols';
    END IF;
    IF (SELECT device_sha256 FROM sessions WHERE id = NEW.session_id) IS DISTINCT FROM NEW.device_sha256 THEN
        RAISE EXCEPTION 'atb_rule:session_device_mismatch: the verdict names a device other than its session''s';
    END IF;
    -- The gate set: names the store knows for this protocol digest and kind, each once; an accepted or
    -- quarantined verdict carries every required gate.
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(g) AS e
               WHERE NOT EXISTS (SELECT 1 FROM expected_gates x
                                 WHERE x.protocol_sha256 = NEW.protocol_sha256 AND x.kind = NEW.kind
                                   AND x.name = e ->> 'name')) THEN
        RAISE EXCEPTION 'atb_rule:unknown_gate: a gate result names a gate the store does not expect for this protocol and kind';
    END IF;
    IF (SELECT count(*) FROM jsonb_array_elements(g)) <> (SELECT count(DISTINCT e ->> 'name') FROM jsonb_array_elements(g) AS e) THEN
        RAISE EXCEPTION 'atb_rule:duplicate_gate: a gate result appears twice';
    END IF;
    IF NEW.status IN ('accepted', 'quarantined')
       AND EXISTS (SELECT 1 FROM expected_gates x
                   WHERE x.protocol_sha256 = NEW.protocol_sha256 AND x.kind = NEW.kind AND x.required = 1
                     AND x.name NOT IN (SELECT e ->> 'name' FROM jsonb_array_elements(g) AS e)) THEN
        RAISE EXCEPTION 'atb_rule:incomplete_gate_set: an accepted or quarantined verdict must carry every required gate';
    END IF;
    -- One measurement set belongs to one verdict and measures that verdict's own subjects.
    IF (NEW.candidate_set_id IS NOT NULL AND cs.subject_sha256 IS DISTINCT FROM NEW.candidate_sha256)
       OR (NEW.baseline_set_id IS NOT NULL AND bs.subject_sha256 IS DISTINCT FROM NEW.baseline_sha256) THEN
        RAISE EXCEPTION 'atb_rule:measurement_set_subject_mismatch: a measurement set measures another candidate or baseline than the verdict names';
    END IF;
    IF (NEW.candidate_set_id IS NOT NULL AND EXISTS (SELECT 1 FROM verdicts WHERE candidate_set_id = NEW.candidate_set_id))
       OR (NEW.baseline_set_id IS NOT NULL AND EXISTS (SELECT 1 FROM verdicts WHERE baseline_set_id = NEW.baseline_set_id))
       OR (NEW.candidate_set_id IS NOT NULL AND NEW.candidate_set_id IS NOT DISTINCT FROM NEW.baseline_set_id) THEN
        RAISE EXCEPTION 'atb_rule:measurement_set_reused: a measurement set is already used by another verdict';
    END IF;
    -- The ratio must agree with its own samples (the bound and its reasoning: schema.sql).
    IF NEW.ratio IS NOT NULL AND NEW.candidate_set_id IS NOT NULL AND NEW.baseline_set_id IS NOT NULL THEN
        SELECT min(CASE WHEN s.unit = 'requests_per_s' THEN s.c_min / s.b_max ELSE s.b_min / s.c_max END),
               max(CASE WHEN s.unit = 'requests_per_s' THEN s.c_max / s.b_min ELSE s.b_max / s.c_min END)
          INTO lo, hi
          FROM (SELECT cs.unit AS unit,
                       (SELECT min(j::float8) FROM jsonb_array_elements(atb_jsonb(mc.samples_json)) j) AS c_min,
                       (SELECT max(j::float8) FROM jsonb_array_elements(atb_jsonb(mc.samples_json)) j) AS c_max,
                       (SELECT min(j::float8) FROM jsonb_array_elements(atb_jsonb(mb.samples_json)) j) AS b_min,
                       (SELECT max(j::float8) FROM jsonb_array_elements(atb_jsonb(mb.samples_json)) j) AS b_max
                  FROM measurements mc
                  JOIN measurements mb ON mb.set_id = NEW.baseline_set_id AND mb.seed = mc.seed
                 WHERE mc.set_id = NEW.candidate_set_id) AS s;
        IF lo IS NULL OR NEW.ratio < lo * (1 - 1e-9) OR NEW.ratio > hi * (1 + 1e-9) THEN
            RAISE EXCEPTION 'atb_rule:ratio_contradicts_samples: the ratio lies outside what its stored samples can produce';
        END IF;
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION atb_rules_measurement_sets() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT device_sha256 FROM sessions WHERE id = NEW.session_id) IS DISTINCT FROM NEW.device_sha256 THEN
        RAISE EXCEPTION 'atb_rule:session_device_mismatch: a measurement set names a device other than its session''s';
    END IF;
    RETURN NEW;
END
$$;

-- A measurement set is sealed once a verdict uses it; samples are finite positive numbers.
CREATE OR REPLACE FUNCTION atb_rules_measurements() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM verdicts WHERE candidate_set_id = NEW.set_id OR baseline_set_id = NEW.set_id) THEN
        RAISE EXCEPTION 'atb_rule:measurement_set_sealed: this measurement set is already used by a verdict';
    END IF;
    IF (SELECT protocol_sha256 FROM measurement_sets WHERE id = NEW.set_id) IS DISTINCT FROM NEW.protocol_sha256 THEN
        RAISE EXCEPTION 'atb_rule:measurement_protocol_mismatch: a measurement must carry its set''s protocol digest';
    END IF;
    IF jsonb_typeof(atb_jsonb(NEW.samples_json)) = 'array'
       AND EXISTS (SELECT 1 FROM jsonb_array_elements(atb_jsonb(NEW.samples_json)) AS e
                   WHERE jsonb_typeof(e) <> 'number' OR NOT (e::numeric > 0)
                      OR e::numeric > 1.7976931348623157e308) THEN
        RAISE EXCEPTION 'atb_rule:malformed_samples: every sample must be a finite positive number';
    END IF;
    IF NEW.round_lengths_json IS NOT NULL
       AND jsonb_typeof(atb_jsonb(NEW.round_lengths_json)) = 'array'
       AND jsonb_typeof(atb_jsonb(NEW.samples_json)) = 'array'
       AND (EXISTS (SELECT 1 FROM jsonb_array_elements(atb_jsonb(NEW.round_lengths_json)) AS e
                    WHERE jsonb_typeof(e) <> 'number' OR e::text !~ '^[1-9][0-9]*$')
            OR (SELECT coalesce(sum(e::numeric), 0) FROM jsonb_array_elements(atb_jsonb(NEW.round_lengths_json)) AS e)
               <> jsonb_array_length(atb_jsonb(NEW.samples_json))) THEN
        RAISE EXCEPTION 'atb_rule:malformed_round_lengths: round lengths must be positive integers summing to the number of samples';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION atb_rules_quarantine_reviews() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT status FROM verdicts WHERE id = NEW.verdict_id) IS DISTINCT FROM 'quarantined' THEN
        RAISE EXCEPTION 'atb_rule:review_of_unquarantined_verdict: only a quarantined verdict can be reviewed';
    END IF;
    -- Clearing needs the extended pass's verdict: another stored verdict of the same candidate on the
    -- same task, correct, with a measured ratio, accepted or quarantined again, every gate passed but
    -- the anomaly breaker itself.
    IF NEW.cleared = 1 AND (
          NEW.extended_verdict_id IS NULL OR NEW.extended_verdict_id IS NOT DISTINCT FROM NEW.verdict_id
       OR NOT EXISTS (
            SELECT 1 FROM verdicts x JOIN verdicts q ON q.id = NEW.verdict_id
            WHERE x.id = NEW.extended_verdict_id AND x.candidate_sha256 = q.candidate_sha256
              AND x.task_id = q.task_id AND x.kind = q.kind AND x.correct = 1 AND x.ratio IS NOT NULL
              AND x.status IN ('accepted', 'quarantined')
              AND NOT EXISTS (SELECT 1 FROM atb_gates(x.gates_json) AS e
                              WHERE (e ->> 'name') IS DISTINCT FROM 'anomaly'
                                AND (e -> 'passed') IS DISTINCT FROM 'true'::jsonb))) THEN
        RAISE EXCEPTION 'atb_rule:cleared_without_extended_pass: a quarantine can be cleared only with a passing extended verdict of the same candidate';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION atb_rules_iterations() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.usable = 1 AND (SELECT status FROM verdicts WHERE id = NEW.verdict_id) IS DISTINCT FROM 'accepted' THEN
        RAISE EXCEPTION 'atb_rule:usable_iteration_not_accepted: a usable iteration needs an accepted verdict';
    END IF;
    IF NEW.idx >= (SELECT budget FROM campaigns WHERE id = NEW.campaign_id) THEN
        RAISE EXCEPTION 'atb_rule:iteration_over_budget: the campaign''s budget is already spent';
    END IF;
    IF NEW.verdict_id IS NOT NULL
       AND (SELECT task_id FROM verdicts WHERE id = NEW.verdict_id)
           IS DISTINCT FROM (SELECT task_id FROM campaigns WHERE id = NEW.campaign_id) THEN
        RAISE EXCEPTION 'atb_rule:iteration_verdict_other_task: the iteration''s verdict is for another task';
    END IF;
    IF EXISTS (SELECT 1 FROM campaign_outcomes WHERE campaign_id = NEW.campaign_id) THEN
        RAISE EXCEPTION 'atb_rule:iteration_after_outcome: the campaign has finished; it takes no more iterations';
    END IF;
    RETURN NEW;
END
$$;

-- 'completed' means the budget was spent: every index 0..budget-1 is stored.
CREATE OR REPLACE FUNCTION atb_rules_campaign_outcomes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'completed'
       AND (SELECT count(*) FROM iterations WHERE campaign_id = NEW.campaign_id)
         < (SELECT budget FROM campaigns WHERE id = NEW.campaign_id) THEN
        RAISE EXCEPTION 'atb_rule:completed_short_of_budget: a completed campaign must have stored its budget''s number of iterations';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION atb_rules_protocols() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM protocols WHERE version = NEW.version AND sha256 IS DISTINCT FROM NEW.sha256) THEN
        RAISE EXCEPTION 'atb_rule:protocol_version_taken: the store already holds another digest for this protocol version';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION atb_rules_expected_gates() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM protocols WHERE sha256 = NEW.protocol_sha256) THEN
        RAISE EXCEPTION 'atb_rule:unknown_protocol_digest: expected gates name a protocol digest the store does not know';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION atb_rules_campaigns() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT device_sha256 FROM sessions WHERE id = NEW.session_id) IS DISTINCT FROM NEW.device_sha256 THEN
        RAISE EXCEPTION 'atb_rule:session_device_mismatch: a campaign names a device other than its session''s';
    END IF;
    IF NEW.preregistration_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM preregistrations WHERE id = NEW.preregistration_id) THEN
        RAISE EXCEPTION 'atb_rule:unknown_preregistration: the campaign claims a registration the store does not hold';
    END IF;
    RETURN NEW;
END
$$;

-- ---------------------------------------------------------------- generic rule functions (generated triggers)
CREATE OR REPLACE FUNCTION atb_protocol_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.protocol_sha256 IS NULL OR NEW.protocol_version IS NULL THEN
        RAISE EXCEPTION 'atb_rule:missing_protocol_digest: every % row must carry protocol_version and protocol_sha256', TG_TABLE_NAME;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM protocols WHERE sha256 = NEW.protocol_sha256 AND version = NEW.protocol_version) THEN
        RAISE EXCEPTION 'atb_rule:unknown_protocol_digest: % row carries a protocol digest the store does not know', TG_TABLE_NAME;
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION atb_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' OR TG_OP = 'TRUNCATE' THEN
        RAISE EXCEPTION 'atb_rule:append_only: % rows cannot be deleted', TG_TABLE_NAME;
    END IF;
    RAISE EXCEPTION 'atb_rule:append_only: % rows cannot be changed once stored', TG_TABLE_NAME;
END
$$;
