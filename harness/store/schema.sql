-- AutoTuneBench results store, SQLite dialect. Schema version 3 (PRAGMA user_version). A file of another
-- version is refused and left untouched: a newer one is never rewritten, and a version-1 file (before
-- the hash chain) cannot be verified, so it must be moved aside and the store re-created. Version 3
-- adds measurements.round_lengths_json; a NULL there is left out of the row's hash
-- (harness/store/_chain.py), so rows written before the column existed keep their hashes.
-- Any edit to a CREATE statement below (even a comment inside a trigger body, which SQLite stores) changes
-- what verification expects: bump SCHEMA_VERSION (harness/store/_verify.py) with it and say how old
-- stores are handled.
--
-- The database itself refuses untrustworthy rows: every rule below is a CHECK or a trigger, so a raw
-- INSERT that bypasses Python is refused just as the API's is. Each trigger raises
-- 'atb_rule:<rule_name>: <what is wrong>'; the Python layer maps that to IngestRejected(rule=...).
-- Tables holding results are append-only: UPDATE and DELETE are refused. State changes (a quarantine
-- cleared, a campaign finished) are new rows, never edits.
--
-- Tamper evidence (issue 14). Rules stop mistakes and raw inserts, but any writer with file access
-- can DROP TRIGGER. So every row of every table below also carries
--   chain_seq  its position in ONE store-wide chain (1, 2, 3, ... across all tables, no gaps), and
--   row_hash   sha256(previous row's row_hash + "\n" + table + "\n" + canonical JSON of this row's
--              columns, row_hash excluded, chain_seq included); the first row's previous hash is 64 zeros.
-- The Python writer computes row_hash inside the insert's transaction (harness/store/_chain.py, which
-- defines the canonical JSON); `atb store verify` recomputes the chain, compares every table, index and
-- trigger with this file's definitions, checks user_version, and replays every row, in chain order,
-- into a fresh database built from this file, so every rule below is re-checked on every stored row.
--
-- Generated rules (harness/store/_sqlite.py, schema_sql(); same rule names in every dialect):
--   <table>_protocol_stamp  missing_protocol_digest, unknown_protocol_digest   (tables with protocol_sha256)
--   <table>_no_update       append_only                                        (every table)
--   <table>_no_delete       append_only                                        (every table)
--   <table>_chain           chain_order: NEW.chain_seq must be 1 + the largest chain_seq of any table
--                           duplicate_key: a row with this primary key, UNIQUE key or rowid is stored.
--                           SQLite's INSERT OR REPLACE / REPLACE INTO delete the old row WITHOUT firing
--                           delete triggers (recursive_triggers is off by default), and upserts
--                           (ON CONFLICT DO UPDATE) would edit it: a BEFORE INSERT trigger runs before
--                           either, so it refuses both. (PostgreSQL has no REPLACE; its upsert is an
--                           UPDATE, which the no_update rule refuses.)
--
-- Porting to a server database: the same tables and rules, written as that database's constraints and
-- triggers (PostgreSQL: CHECK + PL/pgSQL triggers raising with the same rule names). Functions used
-- below and their meaning: json_valid(x) (strict RFC 8259 text), json_each(x) (one row per element:
-- value, type), json_type(x, path), json_extract(x, path).

-- One digest per version: a second digest named like a held version is refused (protocol_version_taken
-- below, and this UNIQUE), and the released digests are also constants in protocol/_released.py,
-- which `atb store verify` checks every row against.
CREATE TABLE IF NOT EXISTS protocols (
    sha256 TEXT PRIMARY KEY CHECK (length(sha256) = 64),
    version TEXT NOT NULL UNIQUE CHECK (length(version) > 0),
    paired_seeds_required INTEGER NOT NULL CHECK (paired_seeds_required > 0),
    registered_at TEXT NOT NULL,
    chain_seq INTEGER NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (length(row_hash) = 64 AND row_hash NOT GLOB '*[^0-9a-f]*')
);

-- The gate names a verdict must carry, per protocol digest and kind. The code fills it when it
-- registers a protocol (harness/store/_gates.py): the built-in gates are required on every accepted or
-- quarantined verdict; plug-in gates and the fail-closed placeholders are known but not required.
CREATE TABLE IF NOT EXISTS expected_gates (
    protocol_sha256 TEXT NOT NULL REFERENCES protocols(sha256),
    kind TEXT NOT NULL CHECK (kind IN ('kernel', 'engine')),
    name TEXT NOT NULL CHECK (length(name) > 0),
    required INTEGER NOT NULL CHECK (required IN (0, 1)),
    created_at TEXT NOT NULL,
    chain_seq INTEGER NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (length(row_hash) = 64 AND row_hash NOT GLOB '*[^0-9a-f]*'),
    PRIMARY KEY (protocol_sha256, kind, name)
);

CREATE TABLE IF NOT EXISTS devices (
    sha256 TEXT PRIMARY KEY CHECK (length(sha256) = 64),
    backend TEXT NOT NULL CHECK (backend IN ('cpu', 'cuda', 'mlx')),
    fingerprint_json TEXT NOT NULL CHECK (json_valid(fingerprint_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq INTEGER NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (length(row_hash) = 64 AND row_hash NOT GLOB '*[^0-9a-f]*')
);

CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    device_sha256 TEXT NOT NULL REFERENCES devices(sha256),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    started_at TEXT NOT NULL,
    note TEXT NOT NULL DEFAULT '',
    chain_seq INTEGER NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (length(row_hash) = 64 AND row_hash NOT GLOB '*[^0-9a-f]*')
);

CREATE TABLE IF NOT EXISTS ceilings (
    session_id TEXT PRIMARY KEY REFERENCES sessions(id),
    device_sha256 TEXT NOT NULL REFERENCES devices(sha256),
    bytes_per_s REAL NOT NULL CHECK (bytes_per_s > 0),
    flops_per_s REAL NOT NULL CHECK (flops_per_s > 0),
    method TEXT NOT NULL,
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq INTEGER NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (length(row_hash) = 64 AND row_hash NOT GLOB '*[^0-9a-f]*')
);

CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('kernel', 'engine')),
    source_sha256 TEXT NOT NULL,
    metadata_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq INTEGER NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (length(row_hash) = 64 AND row_hash NOT GLOB '*[^0-9a-f]*')
);

CREATE TABLE IF NOT EXISTS candidates (
    sha256 TEXT PRIMARY KEY CHECK (length(sha256) = 64),
    kind TEXT NOT NULL CHECK (kind IN ('kernel', 'engine')),
    content TEXT NOT NULL,
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq INTEGER NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (length(row_hash) = 64 AND row_hash NOT GLOB '*[^0-9a-f]*')
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
    chain_seq INTEGER NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (length(row_hash) = 64 AND row_hash NOT GLOB '*[^0-9a-f]*')
);

CREATE TABLE IF NOT EXISTS measurements (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    set_id TEXT NOT NULL REFERENCES measurement_sets(id),
    seed INTEGER NOT NULL,
    samples_json TEXT NOT NULL CHECK (json_valid(samples_json) AND json_type(samples_json) = 'array'
                                      AND json_array_length(samples_json) > 0),
    -- Round boundaries (schema 3): samples_json is one block per interleaved round, and this array holds
    -- each block's length in order, so the verdict's per-(seed, round) ratio recomputes from the row
    -- (harness/stats.py, `atb verify-verdict`). NULL: stored without them (one block).
    round_lengths_json TEXT CHECK (round_lengths_json IS NULL OR (json_valid(round_lengths_json)
                                   AND json_type(round_lengths_json) = 'array'
                                   AND json_array_length(round_lengths_json) > 0)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    chain_seq INTEGER NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (length(row_hash) = 64 AND row_hash NOT GLOB '*[^0-9a-f]*'),
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
    correct INTEGER NOT NULL CHECK (correct IN (0, 1)),
    reason TEXT NOT NULL DEFAULT '',
    ratio REAL CHECK (ratio IS NULL OR ratio > 0),
    ci_low REAL,
    ci_high REAL,
    candidate_set_id TEXT REFERENCES measurement_sets(id),
    baseline_set_id TEXT REFERENCES measurement_sets(id),
    gates_json TEXT,
    detail_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(detail_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq INTEGER NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (length(row_hash) = 64 AND row_hash NOT GLOB '*[^0-9a-f]*')
);

-- A quarantined verdict stays quarantined until a review row clears it (the extended pass).
CREATE TABLE IF NOT EXISTS quarantine_reviews (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    verdict_id TEXT NOT NULL REFERENCES verdicts(id),
    cleared INTEGER NOT NULL CHECK (cleared IN (0, 1)),
    reason TEXT NOT NULL CHECK (length(reason) > 0),
    extended_verdict_id TEXT REFERENCES verdicts(id),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq INTEGER NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (length(row_hash) = 64 AND row_hash NOT GLOB '*[^0-9a-f]*')
);

CREATE TABLE IF NOT EXISTS preregistrations (
    id TEXT PRIMARY KEY,
    spec_sha256 TEXT NOT NULL UNIQUE CHECK (length(spec_sha256) = 64),
    spec_json TEXT NOT NULL CHECK (json_valid(spec_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq INTEGER NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (length(row_hash) = 64 AND row_hash NOT GLOB '*[^0-9a-f]*')
);

CREATE TABLE IF NOT EXISTS campaigns (
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('kernel', 'engine')),
    tuner_spec TEXT NOT NULL,
    seed INTEGER NOT NULL,
    budget INTEGER NOT NULL CHECK (budget > 0),
    session_id TEXT NOT NULL REFERENCES sessions(id),
    device_sha256 TEXT NOT NULL REFERENCES devices(sha256),
    preregistration_id TEXT REFERENCES preregistrations(id),
    arm TEXT,
    config_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(config_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq INTEGER NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (length(row_hash) = 64 AND row_hash NOT GLOB '*[^0-9a-f]*'),
    CHECK ((preregistration_id IS NULL) = (arm IS NULL))
);

CREATE TABLE IF NOT EXISTS iterations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    campaign_id TEXT NOT NULL REFERENCES campaigns(id),
    idx INTEGER NOT NULL CHECK (idx >= 0),
    candidate_sha256 TEXT,
    verdict_id TEXT REFERENCES verdicts(id),
    usable INTEGER NOT NULL CHECK (usable IN (0, 1)),
    unusable_reason TEXT NOT NULL DEFAULT '',
    tokens_in INTEGER NOT NULL DEFAULT 0,
    tokens_out INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    model_calls INTEGER NOT NULL DEFAULT 0,
    truncated_calls INTEGER NOT NULL DEFAULT 0,
    detail_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(detail_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq INTEGER NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (length(row_hash) = 64 AND row_hash NOT GLOB '*[^0-9a-f]*'),
    UNIQUE (campaign_id, idx),
    CHECK (usable = 0 OR verdict_id IS NOT NULL),
    CHECK (usable = 1 OR length(unusable_reason) > 0)
);

CREATE TABLE IF NOT EXISTS campaign_outcomes (
    campaign_id TEXT PRIMARY KEY REFERENCES campaigns(id),
    status TEXT NOT NULL CHECK (status IN ('completed', 'infrastructure_defect', 'aborted')),
    truncated_fraction REAL NOT NULL DEFAULT 0,
    reason TEXT NOT NULL DEFAULT '',
    detail_json TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(detail_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq INTEGER NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (length(row_hash) = 64 AND row_hash NOT GLOB '*[^0-9a-f]*'),
    CHECK (status = 'completed' OR length(reason) > 0)
);

-- Free-form evidence documents (anchors, retests, remeasures, A/B outcomes), stamped like any row.
CREATE TABLE IF NOT EXISTS reports (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,
    body_json TEXT NOT NULL CHECK (json_valid(body_json)),
    protocol_version TEXT,
    protocol_sha256 TEXT,
    created_at TEXT NOT NULL,
    chain_seq INTEGER NOT NULL UNIQUE CHECK (chain_seq > 0),
    row_hash TEXT NOT NULL CHECK (length(row_hash) = 64 AND row_hash NOT GLOB '*[^0-9a-f]*')
);

-- ---------------------------------------------------------------- verdict rules
CREATE TRIGGER IF NOT EXISTS verdict_rules BEFORE INSERT ON verdicts
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:verdict_without_gate_results: a verdict must carry a non-empty JSON array of gate results')
    WHERE NEW.gates_json IS NULL OR NOT json_valid(NEW.gates_json)
          OR json_type(NEW.gates_json) != 'array' OR json_array_length(NEW.gates_json) = 0;
    SELECT RAISE(ABORT, 'atb_rule:malformed_gate_result: every gate result needs a name and a boolean passed')
    WHERE EXISTS (SELECT 1 FROM json_each(NEW.gates_json)
                  WHERE json_type(value, '$.name') IS NOT 'text'
                     OR json_type(value, '$.passed') NOT IN ('true', 'false'));
    SELECT RAISE(ABORT, 'atb_rule:accepted_with_failed_gate: an accepted verdict needs every gate passed')
    WHERE NEW.status = 'accepted'
      AND EXISTS (SELECT 1 FROM json_each(NEW.gates_json) WHERE json_type(value, '$.passed') != 'true');
    SELECT RAISE(ABORT, 'atb_rule:accepted_but_incorrect: an accepted verdict must be correct')
    WHERE NEW.status = 'accepted' AND NEW.correct != 1;
    SELECT RAISE(ABORT, 'atb_rule:quarantine_without_reason: a quarantined verdict must store its reason')
    WHERE NEW.status = 'quarantined' AND length(NEW.reason) = 0;
    SELECT RAISE(ABORT, 'atb_rule:ratio_without_measurements: a ratio needs a candidate and a baseline measurement set')
    WHERE NEW.ratio IS NOT NULL AND (NEW.candidate_set_id IS NULL OR NEW.baseline_set_id IS NULL);
    SELECT RAISE(ABORT, 'atb_rule:verdict_without_ratio: accepted and quarantined verdicts need a measured ratio')
    WHERE NEW.status IN ('accepted', 'quarantined') AND NEW.ratio IS NULL;
    SELECT RAISE(ABORT, 'atb_rule:ratio_outside_interval: the ratio must lie within its confidence interval')
    WHERE NEW.ratio IS NOT NULL AND (NEW.ci_low IS NULL OR NEW.ci_high IS NULL
                                      OR NEW.ci_low > NEW.ratio OR NEW.ci_high < NEW.ratio);
    SELECT RAISE(ABORT, 'atb_rule:measurement_set_missing: a referenced measurement set does not exist')
    WHERE (NEW.candidate_set_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM measurement_sets WHERE id = NEW.candidate_set_id))
       OR (NEW.baseline_set_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM measurement_sets WHERE id = NEW.baseline_set_id));
    SELECT RAISE(ABORT, 'atb_rule:arm_mismatch: candidate_set_id must name a candidate arm and baseline_set_id a baseline arm')
    WHERE (NEW.candidate_set_id IS NOT NULL AND (SELECT arm FROM measurement_sets WHERE id = NEW.candidate_set_id) != 'candidate')
       OR (NEW.baseline_set_id IS NOT NULL AND (SELECT arm FROM measurement_sets WHERE id = NEW.baseline_set_id) != 'baseline');
    SELECT RAISE(ABORT, 'atb_rule:cross_device_ratio: candidate and baseline were measured on different device fingerprints')
    WHERE NEW.candidate_set_id IS NOT NULL AND NEW.baseline_set_id IS NOT NULL AND (
          (SELECT device_sha256 FROM measurement_sets WHERE id = NEW.candidate_set_id)
       != (SELECT device_sha256 FROM measurement_sets WHERE id = NEW.baseline_set_id)
       OR (SELECT device_sha256 FROM measurement_sets WHERE id = NEW.candidate_set_id) != NEW.device_sha256);
    SELECT RAISE(ABORT, 'atb_rule:cross_session_ratio: candidate and baseline were measured in different measurement sessions')
    WHERE NEW.candidate_set_id IS NOT NULL AND NEW.baseline_set_id IS NOT NULL AND (
          (SELECT session_id FROM measurement_sets WHERE id = NEW.candidate_set_id)
       != (SELECT session_id FROM measurement_sets WHERE id = NEW.baseline_set_id)
       OR (SELECT session_id FROM measurement_sets WHERE id = NEW.candidate_set_id) != NEW.session_id);
    SELECT RAISE(ABORT, 'atb_rule:cross_task_ratio: candidate and baseline measure different tasks')
    WHERE NEW.candidate_set_id IS NOT NULL AND NEW.baseline_set_id IS NOT NULL AND (
          (SELECT task_id FROM measurement_sets WHERE id = NEW.candidate_set_id)
       != (SELECT task_id FROM measurement_sets WHERE id = NEW.baseline_set_id)
       OR (SELECT task_id FROM measurement_sets WHERE id = NEW.candidate_set_id) != NEW.task_id);
    SELECT RAISE(ABORT, 'atb_rule:unpaired_seeds: candidate and baseline measurements do not share the same seed set')
    WHERE NEW.candidate_set_id IS NOT NULL AND NEW.baseline_set_id IS NOT NULL AND (
          EXISTS (SELECT seed FROM measurements WHERE set_id = NEW.candidate_set_id
                  EXCEPT SELECT seed FROM measurements WHERE set_id = NEW.baseline_set_id)
       OR EXISTS (SELECT seed FROM measurements WHERE set_id = NEW.baseline_set_id
                  EXCEPT SELECT seed FROM measurements WHERE set_id = NEW.candidate_set_id));
    SELECT RAISE(ABORT, 'atb_rule:too_few_paired_seeds: fewer paired seeds than the protocol requires')
    WHERE NEW.candidate_set_id IS NOT NULL
      AND (SELECT count(DISTINCT seed) FROM measurements WHERE set_id = NEW.candidate_set_id)
        < (SELECT paired_seeds_required FROM protocols WHERE sha256 = NEW.protocol_sha256);
    SELECT RAISE(ABORT, 'atb_rule:protocol_mismatch: measurements and verdict were made under different protocols')
    WHERE NEW.candidate_set_id IS NOT NULL AND NEW.baseline_set_id IS NOT NULL AND (
          (SELECT protocol_sha256 FROM measurement_sets WHERE id = NEW.candidate_set_id) IS NOT NEW.protocol_sha256
       OR (SELECT protocol_sha256 FROM measurement_sets WHERE id = NEW.baseline_set_id) IS NOT NEW.protocol_sha256);
    SELECT RAISE(ABORT, 'atb_rule:session_device_mismatch: the verdict names a device other than its session''s')
    WHERE (SELECT device_sha256 FROM sessions WHERE id = NEW.session_id) IS NOT NEW.device_sha256;
    -- The gate set (issue 14): names the store knows for this protocol digest and kind, each once; an
    -- accepted or quarantined verdict carries every required gate. A rejection may stop early (a failed
    -- engine launch runs only the launch gate), which can only make a verdict stricter.
    SELECT RAISE(ABORT, 'atb_rule:unknown_gate: a gate result names a gate the store does not expect for this protocol and kind')
    WHERE EXISTS (SELECT 1 FROM json_each(NEW.gates_json) AS g
                  WHERE NOT EXISTS (SELECT 1 FROM expected_gates e
                                    WHERE e.protocol_sha256 = NEW.protocol_sha256 AND e.kind = NEW.kind
                                      AND e.name = json_extract(g.value, '$.name')));
    SELECT RAISE(ABORT, 'atb_rule:duplicate_gate: a gate result appears twice')
    WHERE (SELECT count(*) FROM json_each(NEW.gates_json))
       != (SELECT count(DISTINCT json_extract(value, '$.name')) FROM json_each(NEW.gates_json));
    SELECT RAISE(ABORT, 'atb_rule:incomplete_gate_set: an accepted or quarantined verdict must carry every required gate')
    WHERE NEW.status IN ('accepted', 'quarantined')
      AND EXISTS (SELECT 1 FROM expected_gates e
                  WHERE e.protocol_sha256 = NEW.protocol_sha256 AND e.kind = NEW.kind AND e.required = 1
                    AND e.name NOT IN (SELECT json_extract(value, '$.name') FROM json_each(NEW.gates_json)));
    -- One measurement set belongs to one verdict and measures that verdict's own subjects.
    SELECT RAISE(ABORT, 'atb_rule:measurement_set_subject_mismatch: a measurement set measures another candidate or baseline than the verdict names')
    WHERE (NEW.candidate_set_id IS NOT NULL
           AND (SELECT subject_sha256 FROM measurement_sets WHERE id = NEW.candidate_set_id) IS NOT NEW.candidate_sha256)
       OR (NEW.baseline_set_id IS NOT NULL
           AND (SELECT subject_sha256 FROM measurement_sets WHERE id = NEW.baseline_set_id) IS NOT NEW.baseline_sha256);
    SELECT RAISE(ABORT, 'atb_rule:measurement_set_reused: a measurement set is already used by another verdict')
    WHERE (NEW.candidate_set_id IS NOT NULL
           AND EXISTS (SELECT 1 FROM verdicts WHERE candidate_set_id = NEW.candidate_set_id))
       OR (NEW.baseline_set_id IS NOT NULL
           AND EXISTS (SELECT 1 FROM verdicts WHERE baseline_set_id = NEW.baseline_set_id))
       OR (NEW.candidate_set_id IS NOT NULL AND NEW.candidate_set_id IS NEW.baseline_set_id);
    -- The ratio must agree with its own samples. Every ratio the harness forms is a median or mean of
    -- per-seed ratios of per-seed location statistics (medians of blocks, means of repetitions), each
    -- of which lies within that seed's [min, max]. So for time units (ns; ratio = baseline/candidate)
    --   min over seeds of min(baseline)/max(candidate) <= ratio <= max over seeds of max(baseline)/min(candidate),
    -- and for throughput (requests_per_s; ratio = candidate/baseline) the same with the arms swapped.
    -- A relative slack of 1e-9 absorbs floating-point rounding. Sound (an honest ratio always passes),
    -- though not tight: it refuses a ratio its samples cannot produce, not every wrong one.
    SELECT RAISE(ABORT, 'atb_rule:ratio_contradicts_samples: the ratio lies outside what its stored samples can produce')
    WHERE NEW.ratio IS NOT NULL AND NEW.candidate_set_id IS NOT NULL AND NEW.baseline_set_id IS NOT NULL
      AND (SELECT CASE WHEN b.lo IS NULL THEN 1
                       ELSE NEW.ratio < b.lo * (1 - 1e-9) OR NEW.ratio > b.hi * (1 + 1e-9) END
           FROM (SELECT min(CASE WHEN s.unit = 'requests_per_s' THEN s.c_min / s.b_max ELSE s.b_min / s.c_max END) AS lo,
                        max(CASE WHEN s.unit = 'requests_per_s' THEN s.c_max / s.b_min ELSE s.b_max / s.c_min END) AS hi
                 FROM (SELECT ms.unit AS unit,
                              (SELECT min(j.value) FROM json_each(mc.samples_json) j) AS c_min,
                              (SELECT max(j.value) FROM json_each(mc.samples_json) j) AS c_max,
                              (SELECT min(j.value) FROM json_each(mb.samples_json) j) AS b_min,
                              (SELECT max(j.value) FROM json_each(mb.samples_json) j) AS b_max
                       FROM measurements mc
                       JOIN measurements mb ON mb.set_id = NEW.baseline_set_id AND mb.seed = mc.seed
                       JOIN measurement_sets ms ON ms.id = NEW.candidate_set_id
                       WHERE mc.set_id = NEW.candidate_set_id) AS s) AS b);
END;

CREATE TRIGGER IF NOT EXISTS measurement_set_rules BEFORE INSERT ON measurement_sets
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:session_device_mismatch: a measurement set names a device other than its session''s')
    WHERE (SELECT device_sha256 FROM sessions WHERE id = NEW.session_id) IS NOT NEW.device_sha256;
END;

-- A measurement set is sealed once a verdict uses it: seeds cannot be added afterwards.
CREATE TRIGGER IF NOT EXISTS measurement_sealed BEFORE INSERT ON measurements
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:measurement_set_sealed: this measurement set is already used by a verdict')
    WHERE EXISTS (SELECT 1 FROM verdicts WHERE candidate_set_id = NEW.set_id OR baseline_set_id = NEW.set_id);
    SELECT RAISE(ABORT, 'atb_rule:measurement_protocol_mismatch: a measurement must carry its set''s protocol digest')
    WHERE (SELECT protocol_sha256 FROM measurement_sets WHERE id = NEW.set_id) IS NOT NEW.protocol_sha256;
    -- Samples are finite positive numbers (json_valid already refuses NaN and Infinity; 1e999 parses
    -- as infinity, so the upper bound is the largest double; a string such as "3" is refused by type).
    SELECT RAISE(ABORT, 'atb_rule:malformed_samples: every sample must be a finite positive number')
    WHERE EXISTS (SELECT 1 FROM json_each(NEW.samples_json)
                  WHERE type NOT IN ('integer', 'real') OR NOT (value > 0) OR value > 1.7976931348623157e308);
    -- Round boundaries split the samples into non-empty consecutive blocks: positive integers whose sum
    -- is the number of samples.
    SELECT RAISE(ABORT, 'atb_rule:malformed_round_lengths: round lengths must be positive integers summing to the number of samples')
    WHERE NEW.round_lengths_json IS NOT NULL
      AND CASE WHEN NOT json_valid(NEW.round_lengths_json) OR json_type(NEW.round_lengths_json) != 'array'
                    OR NOT json_valid(NEW.samples_json) OR json_type(NEW.samples_json) != 'array' THEN 0
               ELSE EXISTS (SELECT 1 FROM json_each(NEW.round_lengths_json) WHERE type != 'integer' OR value < 1)
                    OR (SELECT coalesce(sum(value), 0) FROM json_each(NEW.round_lengths_json))
                       != json_array_length(NEW.samples_json) END;
END;

CREATE TRIGGER IF NOT EXISTS quarantine_review_rules BEFORE INSERT ON quarantine_reviews
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:review_of_unquarantined_verdict: only a quarantined verdict can be reviewed')
    WHERE (SELECT status FROM verdicts WHERE id = NEW.verdict_id) IS NOT 'quarantined';
    -- Clearing needs the extended pass's verdict: another stored verdict of the same candidate on the
    -- same task, correct, with a measured ratio, accepted or quarantined again (its speedup is still
    -- anomalous), and with every gate passed except the anomaly breaker itself (harness/quarantine.py).
    SELECT RAISE(ABORT, 'atb_rule:cleared_without_extended_pass: a quarantine can be cleared only with a passing extended verdict of the same candidate')
    WHERE NEW.cleared = 1 AND (
          NEW.extended_verdict_id IS NULL OR NEW.extended_verdict_id IS NEW.verdict_id
       OR NOT EXISTS (
            SELECT 1 FROM verdicts x JOIN verdicts q ON q.id = NEW.verdict_id
            WHERE x.id = NEW.extended_verdict_id AND x.candidate_sha256 = q.candidate_sha256
              AND x.task_id = q.task_id AND x.kind = q.kind AND x.correct = 1 AND x.ratio IS NOT NULL
              AND x.status IN ('accepted', 'quarantined')
              AND NOT EXISTS (SELECT 1 FROM json_each(x.gates_json)
                              WHERE json_extract(value, '$.name') != 'anomaly'
                                AND json_type(value, '$.passed') != 'true')));
END;

CREATE TRIGGER IF NOT EXISTS iteration_rules BEFORE INSERT ON iterations
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:usable_iteration_not_accepted: a usable iteration needs an accepted verdict')
    WHERE NEW.usable = 1 AND (SELECT status FROM verdicts WHERE id = NEW.verdict_id) IS NOT 'accepted';
    SELECT RAISE(ABORT, 'atb_rule:iteration_over_budget: the campaign''s budget is already spent')
    WHERE NEW.idx >= (SELECT budget FROM campaigns WHERE id = NEW.campaign_id);
    SELECT RAISE(ABORT, 'atb_rule:iteration_verdict_other_task: the iteration''s verdict is for another task')
    WHERE NEW.verdict_id IS NOT NULL
      AND (SELECT task_id FROM verdicts WHERE id = NEW.verdict_id) IS NOT (SELECT task_id FROM campaigns WHERE id = NEW.campaign_id);
    SELECT RAISE(ABORT, 'atb_rule:iteration_after_outcome: the campaign has finished; it takes no more iterations')
    WHERE EXISTS (SELECT 1 FROM campaign_outcomes WHERE campaign_id = NEW.campaign_id);
END;

-- 'completed' means the budget was spent: every index 0..budget-1 is stored (UNIQUE (campaign_id, idx)
-- and idx < budget make the count exact). A run that ends early is 'aborted' with its reason.
CREATE TRIGGER IF NOT EXISTS campaign_outcome_rules BEFORE INSERT ON campaign_outcomes
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:completed_short_of_budget: a completed campaign must have stored its budget''s number of iterations')
    WHERE NEW.status = 'completed'
      AND (SELECT count(*) FROM iterations WHERE campaign_id = NEW.campaign_id)
        < (SELECT budget FROM campaigns WHERE id = NEW.campaign_id);
END;

CREATE TRIGGER IF NOT EXISTS protocol_rules BEFORE INSERT ON protocols
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:protocol_version_taken: the store already holds another digest for this protocol version')
    WHERE EXISTS (SELECT 1 FROM protocols WHERE version = NEW.version AND sha256 IS NOT NEW.sha256);
END;

CREATE TRIGGER IF NOT EXISTS expected_gate_rules BEFORE INSERT ON expected_gates
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:unknown_protocol_digest: expected gates name a protocol digest the store does not know')
    WHERE NOT EXISTS (SELECT 1 FROM protocols WHERE sha256 = NEW.protocol_sha256);
END;

-- Lookups the rules above make on every insert (without them a measurement insert scans every verdict).
CREATE INDEX IF NOT EXISTS verdicts_candidate_set ON verdicts (candidate_set_id);
CREATE INDEX IF NOT EXISTS verdicts_baseline_set ON verdicts (baseline_set_id);
CREATE INDEX IF NOT EXISTS quarantine_reviews_verdict ON quarantine_reviews (verdict_id);

CREATE TRIGGER IF NOT EXISTS campaign_rules BEFORE INSERT ON campaigns
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:session_device_mismatch: a campaign names a device other than its session''s')
    WHERE (SELECT device_sha256 FROM sessions WHERE id = NEW.session_id) IS NOT NEW.device_sha256;
    SELECT RAISE(ABORT, 'atb_rule:unknown_preregistration: the campaign claims a registration the store does not hold')
    WHERE NEW.preregistration_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM preregistrations WHERE id = NEW.preregistration_id);
END;
