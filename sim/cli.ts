// PLACEHOLDER: replaced by the sim implementation.
import { uws } from '../lib/uws.js';
import type { Command } from '../bin/cli.js';
export const simCommand: Command = { summary: 'sim', async run() { uws(); return 0; } };
