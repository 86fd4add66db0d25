// The database schema as an ordered list of migrations. Migration N (1-based) brings the schema
// from version N-1 to N; the version lives in SQLite's user_version. Never edit a released
// migration: append a new one.
//
// Money: credits are stored as integer micro-credits (1 credit = 1_000_000) so that sums of many
// small instance-usage charges never drift the way floating point would.
export const MIGRATIONS: readonly string[] = [
  // 1: accounts, sign-in, keys, SSH keys, coupons, credits ledger, templates, images, models, limits.
  `
  CREATE TABLE accounts (
    id                  INTEGER PRIMARY KEY,
    email               TEXT    NOT NULL UNIQUE COLLATE NOCASE,
    provider            TEXT    NOT NULL DEFAULT 'password',  -- how the account signs in ('password'; OAuth later)
    password_hash       TEXT,                                 -- scrypt; NULL: cannot sign in with a password
    verified            INTEGER NOT NULL DEFAULT 0 CHECK (verified IN (0, 1)),
    is_editor           INTEGER NOT NULL DEFAULT 0 CHECK (is_editor IN (0, 1)),
    ssh_public_key      TEXT,                                 -- data only, never interpolated into a command
    launch_verification INTEGER NOT NULL DEFAULT 0 CHECK (launch_verification IN (0, 1)),
    created_at          INTEGER NOT NULL
  ) STRICT;

  -- External sign-in identities (OAuth), one row per provider subject. Unused by the password flow.
  CREATE TABLE account_identities (
    provider   TEXT    NOT NULL,
    subject    TEXT    NOT NULL,
    account_id INTEGER NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    PRIMARY KEY (provider, subject)
  ) STRICT;

  -- At most one API key per account (unique account_id). The clear key is kept only encrypted
  -- (AES-256-GCM with the data dir's secret) so GET /api/me can return it; lookups use the hash.
  CREATE TABLE api_keys (
    key_hash   TEXT    PRIMARY KEY,
    account_id INTEGER NOT NULL UNIQUE REFERENCES accounts(id) ON DELETE CASCADE,
    key_sealed TEXT    NOT NULL,
    created_at INTEGER NOT NULL
  ) STRICT;

  CREATE TABLE sessions (
    token_hash TEXT    PRIMARY KEY,
    account_id INTEGER NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    csrf_token TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX sessions_by_account ON sessions(account_id);

  -- Append-only: rows are inserted, never updated or deleted. The balance is SUM(amount_micros).
  CREATE TABLE ledger (
    id              INTEGER PRIMARY KEY,
    account_id      INTEGER NOT NULL REFERENCES accounts(id),
    kind            TEXT    NOT NULL CHECK (kind IN ('coupon', 'grant', 'instance_usage')),
    amount_micros   INTEGER NOT NULL,
    idempotency_key TEXT    NOT NULL UNIQUE,
    ref             TEXT,
    created_at      INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX ledger_by_account ON ledger(account_id, amount_micros);
  CREATE TRIGGER ledger_no_update BEFORE UPDATE ON ledger BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;
  CREATE TRIGGER ledger_no_delete BEFORE DELETE ON ledger BEGIN SELECT RAISE(ABORT, 'ledger is append-only'); END;

  CREATE TABLE coupons (
    code          TEXT    PRIMARY KEY,
    credits_micros INTEGER NOT NULL CHECK (credits_micros > 0),
    account_id    INTEGER REFERENCES accounts(id),   -- issued to this account only; NULL: anyone
    redeemed_by   INTEGER REFERENCES accounts(id),
    redeemed_at   INTEGER,
    created_at    INTEGER NOT NULL
  ) STRICT;

  CREATE TABLE images (
    id         INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    image      TEXT    NOT NULL UNIQUE,
    enabled    INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    created_at INTEGER NOT NULL
  ) STRICT;

  -- Every launch field lives here; an instance copies what it needs at launch (changes apply to
  -- future launches only). account_id NULL: a platform (seed) template.
  CREATE TABLE templates (
    id                 INTEGER PRIMARY KEY,
    account_id         INTEGER REFERENCES accounts(id) ON DELETE CASCADE,
    title              TEXT    NOT NULL,
    image              TEXT    NOT NULL,
    instance_type      TEXT    NOT NULL,
    description        TEXT,
    slug               TEXT,
    category           TEXT,
    tags               TEXT    NOT NULL DEFAULT '[]',  -- JSON array of strings
    repo_url           TEXT,
    branch             TEXT    NOT NULL DEFAULT 'main',
    notebook_path      TEXT,
    start_command      TEXT,
    app_port           INTEGER,
    ssh_enabled        INTEGER NOT NULL DEFAULT 0 CHECK (ssh_enabled IN (0, 1)),
    cover_url          TEXT,
    sort_order         INTEGER NOT NULL DEFAULT 0,
    enabled            INTEGER NOT NULL DEFAULT 0 CHECK (enabled IN (0, 1)),
    persistent_storage INTEGER NOT NULL DEFAULT 0 CHECK (persistent_storage IN (0, 1)),
    disk_gb            INTEGER NOT NULL DEFAULT 100,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX templates_by_account ON templates(account_id, sort_order, id);
  CREATE INDEX templates_enabled ON templates(enabled, sort_order, id);

  -- Shared model catalog entries added with rc model add (lib/config.ts modelEntrySchema, as JSON).
  CREATE TABLE models (
    name       TEXT    PRIMARY KEY,
    entry      TEXT    NOT NULL,
    created_at INTEGER NOT NULL
  ) STRICT;

  -- Per-account overrides of the model API gates; NULL: the configured default.
  CREATE TABLE account_limits (
    account_id   INTEGER PRIMARY KEY REFERENCES accounts(id) ON DELETE CASCADE,
    rpm          INTEGER,
    tpm          INTEGER,
    daily_tokens INTEGER
  ) STRICT;

  CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
  ) STRICT;
  `,
  // 2: instances (issue #8, control-plane/instances/README.md). The partial unique index is the
  // one-active-instance rule: two concurrent launches of one account cannot both insert.
  `
  CREATE TABLE instances (
    id               TEXT    PRIMARY KEY,
    account_id       INTEGER NOT NULL REFERENCES accounts(id),
    template_id      INTEGER,                           -- no foreign key: the template may be deleted later
    template         TEXT    NOT NULL,                  -- JSON snapshot of the template at launch
    gpu_count        INTEGER NOT NULL CHECK (gpu_count IN (1, 2, 4)),
    disk_gb          INTEGER NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('pending', 'ready', 'stopping', 'stopped', 'failed')),
    message          TEXT    NOT NULL,
    reason           TEXT,
    detail           TEXT,
    agent_id         TEXT,                              -- host placed on; NULL while waiting for capacity
    spec             TEXT,                              -- JSON launch spec, identical on every (re)send
    endpoint_host    TEXT,
    endpoint_port    INTEGER,
    ssh_port         INTEGER,
    micros_per_hour  INTEGER NOT NULL,                  -- price snapshot (GPU count included)
    period_ms        INTEGER NOT NULL,                  -- billing period snapshot (period indexes never shift)
    billed_periods   INTEGER NOT NULL DEFAULT 0,        -- periods written to the ledger
    created_at       INTEGER NOT NULL,
    placed_at        INTEGER,                           -- billing starts here
    ready_at         INTEGER,
    ended_at         INTEGER,                           -- billing stops here
    expires_at       INTEGER,
    last_activity_at INTEGER,
    updated_at       INTEGER NOT NULL
  ) STRICT;
  CREATE UNIQUE INDEX instances_one_active ON instances(account_id) WHERE state IN ('pending', 'ready');
  CREATE INDEX instances_by_account ON instances(account_id, created_at);
  CREATE INDEX instances_live ON instances(state, created_at) WHERE state IN ('pending', 'ready', 'stopping');

  -- Accepted launches, for the launch rate windows.
  CREATE TABLE instance_launches (
    account_id INTEGER NOT NULL REFERENCES accounts(id),
    at         INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX instance_launches_by_account ON instance_launches(account_id, at);

  -- Single-use launch verification tokens (hashes only).
  CREATE TABLE launch_tokens (
    token_hash TEXT    PRIMARY KEY,
    account_id INTEGER NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    expires_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL
  ) STRICT;
  `,
  // 3 (issue 14): bearer secrets stored only as SHA-256 hashes, like keys. Coupon codes are
  // hashed in place (rc_sha256 is registered by db.ts); the code is shown once, at creation.
  // Sessions kept their CSRF token in clear: it is now derived from the cookie token and only its
  // hash is stored, so the existing sessions end (their users sign in again).
  `
  UPDATE coupons SET code = rc_sha256(code);
  ALTER TABLE coupons RENAME COLUMN code TO code_hash;
  DELETE FROM sessions;
  ALTER TABLE sessions RENAME COLUMN csrf_token TO csrf_hash;
  `,
  // 4: the fleet's GPU hosts (issue #13, control-plane/instances/README.md "Hosts"), registered
  // with `rc host add` and dialled again after every control-plane start. The agent token is
  // kept sealed (AES-256-GCM under seal.key), like API keys: the database alone never reveals it.
  `
  CREATE TABLE hosts (
    name         TEXT    PRIMARY KEY,
    address      TEXT    NOT NULL,                      -- host:port of the agent's gRPC server
    token_sealed TEXT    NOT NULL,
    draining     INTEGER NOT NULL DEFAULT 0 CHECK (draining IN (0, 1)),  -- 1: no new placements
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
  ) STRICT;
  `,
  // 5: the last log lines of ended instances (issue 17): the host forgets an instance's logs when
  // it removes it, so the control plane keeps its tail for GET /api/notebook/logs.
  `
  CREATE TABLE instance_log_tails (
    instance_id TEXT    PRIMARY KEY REFERENCES instances(id),
    lines       TEXT    NOT NULL,                       -- JSON array of strings, oldest first
    saved_at    INTEGER NOT NULL
  ) STRICT;
  `,
  // 6 (issue 14): optional e-mail verification (RC_EMAIL_VERIFICATION). Existing accounts count
  // as verified; links are single-use tokens kept as hashes.
  `
  ALTER TABLE accounts ADD COLUMN email_verified INTEGER NOT NULL DEFAULT 1 CHECK (email_verified IN (0, 1));
  CREATE TABLE email_verifications (
    token_hash TEXT    PRIMARY KEY,
    account_id INTEGER NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    expires_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL
  ) STRICT;
  CREATE INDEX email_verifications_by_account ON email_verifications(account_id);
  `,
  // 7 (issue 32): operator accounts, disabled accounts and the operators' audit log. An operator
  // signs in like anyone and gets the operator API (/api/operator/...); a disabled account (a
  // rejected sign-up) can neither sign in nor use a key. The audit log is append-only, like the
  // ledger: who (an operator's e-mail, or the admin token), what, on what, when.
  `
  ALTER TABLE accounts ADD COLUMN is_operator INTEGER NOT NULL DEFAULT 0 CHECK (is_operator IN (0, 1));
  ALTER TABLE accounts ADD COLUMN disabled INTEGER NOT NULL DEFAULT 0 CHECK (disabled IN (0, 1));
  CREATE TABLE audit_log (
    id      INTEGER PRIMARY KEY,
    at      INTEGER NOT NULL,
    actor   TEXT    NOT NULL,                           -- an operator's e-mail, 'admin-token' or 'cli (database)'
    action  TEXT    NOT NULL,                           -- the operation, e.g. account.verify
    target  TEXT,                                       -- the account's e-mail, the host's name, the instance id...
    detail  TEXT                                        -- the operation's input as JSON, secrets left out
  ) STRICT;
  CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
  CREATE TRIGGER audit_log_no_delete BEFORE DELETE ON audit_log BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END;
  `,
  // 8 (issue 32): the shared models' usage per UTC day, account and model, copied from the gates
  // (which keep about a week) by the roll-up job (operator/usage-rollup.ts), for the operator's
  // 30-day view. Counters only grow: a copy keeps the larger of the stored and the read value.
  `
  CREATE TABLE model_usage_days (
    day                 TEXT    NOT NULL,               -- UTC, YYYY-MM-DD
    account_id          INTEGER NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
    model               TEXT    NOT NULL,
    requests            INTEGER NOT NULL,               -- admitted that day
    input_tokens        INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    cached_input_tokens INTEGER NOT NULL,
    updated_at          INTEGER NOT NULL,
    PRIMARY KEY (day, account_id, model)
  ) STRICT, WITHOUT ROWID;
  `,
  // 9 (issue 42): whether an image serves SSH (runs an SSH server on port 22 that takes root's
  // authorized_keys). SSH is offered only on such images; none of the seeded images does, and an
  // image added before this migration counts as not serving it until an operator says it does.
  `
  ALTER TABLE images ADD COLUMN ssh INTEGER NOT NULL DEFAULT 0 CHECK (ssh IN (0, 1));
  `,
  // 10 (issue 43): leases on background work (control-plane/leases.ts), so that however many
  // control planes share one database, one of them runs each job: the holder renews its lease
  // before each run; another takes it once it has expired, with the next fencing token.
  `
  CREATE TABLE leases (
    name       TEXT    PRIMARY KEY,                     -- the work it guards: background, usage-rollup
    holder     TEXT    NOT NULL,                        -- the control plane holding it (an id per process)
    token      INTEGER NOT NULL,                        -- fencing token: grows each time the lease changes hands
    expires_at INTEGER NOT NULL                         -- ms; past it, any control plane may take the lease
  ) STRICT;
  `,
  // 11 (issue 43): the proxy's single-use hand-over tickets (control-plane/proxy/handover.ts) in
  // the database, so a ticket minted by one control plane is redeemed by whichever serves the
  // instance's origin, once: redeeming deletes the row.
  `
  CREATE TABLE proxy_tickets (
    token_hash   TEXT    PRIMARY KEY,                   -- SHA-256 hex of the ticket (the ticket itself is never stored)
    instance_id  TEXT    NOT NULL,
    session_hash TEXT    NOT NULL,                      -- SHA-256 hex of the console session's token
    expires_at   INTEGER NOT NULL                       -- ms
  ) STRICT;
  `,
];
