// Builds the images the project makes from local files (agent/images/local-images.ts): the test images
// and the seeded templates' images. No registry is used. `--missing` builds only absent ones.
// Prints one line per image with its build time. Needs a build (dist/) and a Docker engine.
import { buildLocalImage, ensureLocalImage, LOCAL_IMAGES, pruneLocalImages } from '../dist/agent/images/local-images.js';

const socket = process.env.DOCKER_HOST?.startsWith('unix://') ? process.env.DOCKER_HOST.slice(7) : '/var/run/docker.sock';
const missingOnly = process.argv.includes('--missing');
const started = Date.now();
for (const tag of Object.keys(LOCAL_IMAGES)) {
  const t0 = Date.now();
  if (missingOnly) await ensureLocalImage(socket, tag);
  else await buildLocalImage(socket, tag);
  console.log(`image ${tag}: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}
await pruneLocalImages(socket); // the untagged images of earlier builds
console.log(`images: ${((Date.now() - started) / 1000).toFixed(1)} s in total`);
