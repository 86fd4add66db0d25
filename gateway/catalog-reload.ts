// A standalone gateway without a control plane takes its catalog from the RC_CONFIG file:
// SIGHUP and a change of that file reload it (streams in flight are not dropped). With a control
// plane the catalog is the control plane's: SIGHUP and the file do not apply (SIGHUP is still
// caught, so it does not end the gateway).
import { watch, type FSWatcher } from 'node:fs';
import { loadConfig } from '../lib/config.js';
import type { Logger } from '../lib/log.js';
import type { Gateway } from './server.js';

export interface CatalogReloadOptions {
  /** False with a control plane: SIGHUP is caught and ignored, the file not watched. */
  reloads: boolean;
  /** The RC_CONFIG file, watched when set. */
  configFile: string | undefined;
}

export class CatalogReload {
  private readonly onHup: () => void;
  private readonly watcher: { close(): void } | undefined;

  constructor(
    private readonly gateway: Gateway,
    private readonly logger: Logger,
    o: CatalogReloadOptions,
  ) {
    this.onHup = () => (o.reloads ? this.reload('SIGHUP') : undefined);
    process.on('SIGHUP', this.onHup);
    this.watcher = o.configFile && o.reloads ? watchFile(o.configFile, () => this.reload('config file changed')) : undefined;
  }

  private reload(why: string): void {
    try {
      const next = loadConfig();
      this.gateway.setModels(next.models);
      this.logger.info('catalog reloaded', { why, models: next.models.map((m) => m.name) });
    } catch (err) {
      this.logger.error('catalog reload failed; keeping the current catalog', { why, err });
    }
  }

  close(): void {
    process.off('SIGHUP', this.onHup);
    this.watcher?.close();
  }
}

/** Calls `onChange` (debounced) when the file changes, including when an editor replaces it. */
function watchFile(path: string, onChange: () => void): { close(): void } {
  let timer: NodeJS.Timeout | undefined;
  let w: FSWatcher | undefined;
  let closed = false;
  const fire = () => {
    clearTimeout(timer);
    timer = setTimeout(onChange, 100);
  };
  const open = () => {
    if (closed) return;
    try {
      w = watch(path, { persistent: false }, (event) => {
        fire();
        // An atomic replace (rename over the file) ends this watch: start a new one.
        if (event === 'rename') {
          w?.close();
          setTimeout(open, 50);
        }
      });
      w.on('error', () => {});
    } catch {
      setTimeout(open, 500);
    }
  };
  open();
  return {
    close: () => {
      closed = true;
      clearTimeout(timer);
      w?.close();
    },
  };
}
