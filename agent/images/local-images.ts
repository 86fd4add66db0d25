// The images the project builds locally, from files of this machine (no registry): a busybox
// base, python3, Debian's sshd, and the images of the seeded templates. `ensureLocalImage`
// builds one when the engine lacks it; the docker runtime calls it for a missing image it knows
// (npm start), the test suites for their images, and .ci/run builds them all up front.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { Client } from 'undici';
import { imageInspectRequest, imageRemoveRequest } from '../docker-api.js';
import { buildImage, LABEL_IMAGE } from './build.js';
import { addBinary, addTree, BUSYBOX, busyboxRoot } from './rootfs.js';

interface ImageDefinition {
  /** What it is, for the README and the build log. */
  description: string;
  /** Fills the root filesystem. */
  fill(root: string): void;
  /** Dockerfile lines after FROM scratch / COPY . / (ENV, CMD). */
  dockerfile: string[];
  /** The host files its root is filled from, each with the Debian package that installs it. */
  hostFiles: HostFile[];
}

/** A file of this machine an image is built from, and the Debian package that installs it. */
interface HostFile {
  path: string;
  debianPackage: string;
}

const BUSYBOX_FILE: HostFile = { path: BUSYBOX, debianPackage: 'busybox-static' };
const PYTHON_FILES: HostFile[] = [BUSYBOX_FILE, { path: '/usr/bin/python3', debianPackage: 'python3' }];

const PATH_ENV = 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** The shell's `${PORT:-n}` in a CMD line: the routed port the agent sets, else the image's default. */
const portOr = (n: number): string => '${PORT:-' + n + '}';

const PYTHON = '/usr/bin/python3';

function python(root: string): void {
  busyboxRoot(root);
  const binary = realpathSync(PYTHON);
  addBinary(root, binary);
  symlinkSync(basename(binary), join(root, 'usr/bin/python3'));
  // The standard library where this python has it (/usr/lib/python3.X on Debian), without tests and tools.
  const stdlib = execFileSync(binary, ['-c', 'import sysconfig; print(sysconfig.get_paths()["stdlib"])'], { encoding: 'utf8' }).trim();
  const skip = readdirSync(stdlib).filter((n) => n.startsWith('config-'));
  addTree(root, stdlib, [...skip, 'test', 'idlelib', 'tkinter', 'ensurepip', 'lib2to3', 'pydoc_data', 'turtledemo']);
  const dynload = join(stdlib, 'lib-dynload');
  for (const f of readdirSync(dynload)) if (f.endsWith('.so')) addBinary(root, join(dynload, f));
  mkdirSync(join(root, 'usr/local/bin'), { recursive: true });
}

/**
 * A demo image's app: python3 and `/app` holding only an index page, the directory its server
 * serves (and its WORKDIR, so a start command that serves the working directory serves it too).
 * Never `/` or a home: an app port of a seeded image must not reach /proc (a process's
 * environment), /etc or the instance files at /rc.
 */
function demoApp(title: string): (root: string) => void {
  return (root) => {
    python(root);
    mkdirSync(join(root, 'app'), { recursive: true, mode: 0o755 });
    writeFileSync(
      join(root, 'app/index.html'),
      `<!doctype html>\n<html><head><meta charset="utf-8"><title>${title}</title></head>\n<body><h1>${title}</h1><p>Served from /app of the rc platform's demo image.</p></body></html>\n`,
    );
  };
}

const SSHD_CONFIG = `Port 22
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AuthorizedKeysFile .ssh/authorized_keys
PidFile /run/sshd.pid
`;

export const LOCAL_IMAGES: Record<string, ImageDefinition> = {
  'rc-test/busybox:1': {
    description: 'static busybox only (tests)',
    fill: busyboxRoot,
    dockerfile: [PATH_ENV, 'CMD ["/bin/sh"]'],
    hostFiles: [BUSYBOX_FILE],
  },
  'rc-test/sshd:1': {
    description: "busybox and Debian's sshd; host keys generated at container start; root logs in with the mounted authorized_keys",
    fill(root) {
      busyboxRoot(root);
      addBinary(root, '/usr/sbin/sshd');
      addBinary(root, '/usr/bin/ssh-keygen');
      mkdirSync(join(root, 'etc/ssh'), { recursive: true });
      writeFileSync(join(root, 'etc/ssh/sshd_config'), SSHD_CONFIG);
      mkdirSync(join(root, 'run/sshd'), { recursive: true, mode: 0o755 });
      mkdirSync(join(root, 'usr/local/bin'), { recursive: true });
      writeFileSync(join(root, 'usr/local/bin/rc-sshd'), '#!/bin/sh\nssh-keygen -A >/dev/null\nexec /usr/sbin/sshd -D -e\n', { mode: 0o755 });
    },
    dockerfile: [PATH_ENV, 'CMD ["/usr/local/bin/rc-sshd"]'],
    hostFiles: [BUSYBOX_FILE, { path: '/usr/sbin/sshd', debianPackage: 'openssh-server' }, { path: '/usr/bin/ssh-keygen', debianPackage: 'openssh-client' }],
  },
  'rc/gradio:latest': {
    description: 'busybox and python3; the app is /app (an index page) served by python3 -m http.server --directory /app on $PORT (7860)',
    fill: demoApp('Gradio demo'),
    dockerfile: [PATH_ENV, 'WORKDIR /app', 'CMD ["/bin/sh", "-c", "exec python3 -m http.server --directory /app ' + portOr(7860) + '"]'],
    hostFiles: PYTHON_FILES,
  },
  'rc/jupyter-pytorch:latest': {
    description:
      'busybox and python3; a stand-in for the notebook UI (python3 -m http.server --directory /app on $PORT, 8888, an index page only): no Jupyter or PyTorch offline',
    fill: demoApp('Jupyter notebook (stand-in)'),
    dockerfile: [PATH_ENV, 'WORKDIR /app', 'CMD ["/bin/sh", "-c", "exec python3 -m http.server --directory /app ' + portOr(8888) + '"]'],
    hostFiles: PYTHON_FILES,
  },
  'rc/vllm-sim:latest': {
    description: "busybox; serves the simulated vLLM backend with the toolbox's rc (mounted at /opt/rc by the agent)",
    fill: busyboxRoot,
    dockerfile: [PATH_ENV, 'CMD ["/bin/sh", "-c", "exec rc sim --host 0.0.0.0 --port ' + portOr(8000) + ' --model demo"]'],
    hostFiles: [BUSYBOX_FILE],
  },
};

/** Label with the digest of the definition an image was built from (localImageDigest). */
export const LABEL_DEFINITION = 'rc.local-image.definition';

/**
 * The digest of what `tag` is built from: its tag and Dockerfile lines and the code that fills its
 * root (this module and rootfs.js, compiled). A changed definition changes it, so an image built
 * from an older one is rebuilt (ensureLocalImage, untagStaleLocalImages), not kept because its tag exists.
 */
export function localImageDigest(tag: string): string {
  const def = LOCAL_IMAGES[tag];
  if (!def) throw new Error(`No local definition for image ${tag}`);
  const h = createHash('sha256').update(JSON.stringify([tag, def.dockerfile, def.description]));
  // This module itself (whatever its file is named) and rootfs.js.
  for (const m of [import.meta.url, './rootfs.js']) h.update(readFileSync(new URL(m, import.meta.url)));
  return h.digest('hex').slice(0, 32);
}

/** The image's state on the engine: absent, built from the current definition, or stale. */
async function imageState(socketPath: string, tag: string): Promise<'absent' | 'current' | 'stale'> {
  const client = new Client('http://localhost', { socketPath });
  try {
    const res = await client.request({ method: 'GET', path: imageInspectRequest(tag).path });
    if (res.statusCode !== 200) {
      await res.body.dump();
      return 'absent';
    }
    const labels = ((await res.body.json()) as { Config?: { Labels?: Record<string, string> | null } }).Config?.Labels ?? {};
    return labels[LABEL_DEFINITION] === localImageDigest(tag) ? 'current' : 'stale';
  } finally {
    await client.close();
  }
}

/**
 * The Debian packages missing from this machine to build `tag` (none when it can be built, or is
 * not a local image): the tests skip with them, and a build names them instead of failing on a file.
 */
export function missingImagePackages(tag: string): string[] {
  const missing = (LOCAL_IMAGES[tag]?.hostFiles ?? []).filter((f) => !existsSync(f.path)).map((f) => f.debianPackage);
  return [...new Set(missing)];
}

/** Builds `tag` from its definition (whether or not it exists). */
export async function buildLocalImage(socketPath: string, tag: string, onOutput?: (line: string) => void): Promise<void> {
  const def = LOCAL_IMAGES[tag];
  if (!def) throw new Error(`No local definition for image ${tag}`);
  const missing = missingImagePackages(tag);
  if (missing.length > 0) throw new Error(`Cannot build ${tag}: this machine lacks ${missing.join(', ')} (Debian: apt-get install ${missing.join(' ')})`);
  const dir = mkdtempSync(join(tmpdir(), 'rc-image-'));
  try {
    def.fill(dir);
    writeFileSync(join(dir, 'Dockerfile'), ['FROM scratch', 'COPY . /', ...def.dockerfile, ''].join('\n'));
    writeFileSync(join(dir, '.dockerignore'), 'Dockerfile\n.dockerignore\n');
    await buildImage({ socketPath, tag, contextDir: dir, labels: { [LABEL_DEFINITION]: localImageDigest(tag) }, onOutput });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Builds `tag` when the project knows it (whether or not the engine has it). Returns false for an
 * image it does not know. The docker runtime's `buildLocalImage` hook: it asks only for images
 * its own inspect found missing.
 */
export async function buildKnownImage(socketPath: string, tag: string, onOutput?: (line: string) => void): Promise<boolean> {
  if (!LOCAL_IMAGES[tag]) return false;
  await buildLocalImage(socketPath, tag, onOutput);
  return true;
}

/**
 * Builds `tag` when the project knows it and the engine lacks it or has it built from an older
 * definition. Returns false for an image it does not know.
 */
export async function ensureLocalImage(socketPath: string, tag: string, onOutput?: (line: string) => void): Promise<boolean> {
  if (LOCAL_IMAGES[tag] && (await imageState(socketPath, tag)) === 'current') return true;
  return buildKnownImage(socketPath, tag, onOutput);
}

/**
 * Removes the tag of every project image built from an older definition (npm start, before the
 * agent starts): the docker runtime then builds it again on first use, as when it was missing.
 * Running containers keep the image they run (the engine only drops the name). Returns the tags.
 */
export async function untagStaleLocalImages(socketPath: string): Promise<string[]> {
  const out: string[] = [];
  for (const tag of Object.keys(LOCAL_IMAGES)) {
    if ((await imageState(socketPath, tag)) !== 'stale') continue;
    const client = new Client('http://localhost', { socketPath });
    try {
      const res = await client.request({ method: 'DELETE', path: imageRemoveRequest(tag).path });
      await res.body.dump();
      if (res.statusCode === 200) out.push(tag);
    } finally {
      await client.close();
    }
  }
  return out;
}

/** Removes untagged leftovers of earlier builds of the project's images (label rc.local-image), nothing else. */
export async function pruneLocalImages(socketPath: string): Promise<void> {
  const client = new Client('http://localhost', { socketPath });
  try {
    const filters = encodeURIComponent(JSON.stringify({ dangling: ['true'], label: [LABEL_IMAGE] }));
    const res = await client.request({ method: 'POST', path: `/images/prune?filters=${filters}` });
    await res.body.dump();
  } finally {
    await client.close();
  }
}
