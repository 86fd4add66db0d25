// An instance's output: copied into its log file while it runs (the runtime's attachLogs), followed
// by a LogWatcher, read back for watchers (GetLogs, following a live instance) and quoted in the
// detail of a failure, so that whoever sees `failed` also sees why the program says it ended.
import { AgentInstanceNotFoundError } from './errors.js';
import type { InstanceFiles } from './instance-files.js';
import type { InstanceTable, Live } from './instance-table.js';
import { DEFAULT_LOG_CAP, type LogCap } from './log-file.js';
import { LogWatcher, readKeptLines, readLastLines, type LogFollower } from './logs.js';
import type { Runtime } from './runtime.js';
import type { RuntimeRef } from './state.js';
import { ACTIVE_STATES } from './types.js';

/** Lines of output quoted in a failure's detail. */
const FAILURE_LOG_LINES = 20;

export class InstanceOutput {
  private readonly cap: LogCap;

  constructor(
    private readonly table: InstanceTable,
    private readonly files: InstanceFiles,
    private readonly runtime: Runtime,
    cap: LogCap | undefined,
  ) {
    this.cap = cap ?? DEFAULT_LOG_CAP;
  }

  file(id: string): string {
    return this.files.logFile(id);
  }

  /** Copies a started (or adopted) instance's output into its log file and follows the file. */
  follow(id: string, ref: RuntimeRef, live: Live): void {
    live.stopLogCopy = this.runtime.attachLogs?.(ref, this.file(id));
    live.logs = new LogWatcher(this.file(id), this.cap);
  }

  /** `detail` followed by the instance's last lines of output, when it wrote any. */
  withLastLines(id: string, live: Live, detail: string): string {
    const lines = live.logs ? live.logs.recent(FAILURE_LOG_LINES) : readLastLines(this.file(id), FAILURE_LOG_LINES);
    return lines.length ? `${detail}\nLast output:\n${lines.join('\n')}` : detail;
  }

  /**
   * The last `tail` lines of an instance's output and, when `follower` is given and the instance is
   * live, the lines after them. Returns `following: false` when there is nothing more to come.
   */
  read(id: string, tail: number, follower?: LogFollower): { lines: string[]; following: boolean; unsubscribe: () => void } {
    const rec = this.table.records[id];
    if (!rec) throw new AgentInstanceNotFoundError(id);
    const watcher = this.table.liveOf(id)?.logs;
    if (watcher && ACTIVE_STATES.has(rec.info.state)) {
      const r = watcher.tailAndFollow(tail, follower);
      return { lines: r.lines, following: follower !== undefined, unsubscribe: r.unsubscribe };
    }
    return { lines: readKeptLines(this.file(id), tail, this.cap), following: false, unsubscribe: () => {} };
  }
}
