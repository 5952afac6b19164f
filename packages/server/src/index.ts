export { clusterFromEnv, loadConfig, tlsFromEnv, type ClusterConfig, type Limits, type ServerConfig } from './config.js';
export { startServer, type RunningServer } from './server.js';
export { buildImage, imageBuilt, imageInfo, imageRootfs, IMAGE_NAMES, type DockerfileBuild, type DockerfileBuilder } from './images/index.js';
export { buildAssets } from './machines/vm/assets.js';
export { Engine } from './engine/engine.js';
export { ShellbaseError } from './errors.js';
export { SANDBOX_CAPS } from './runtime/index.js';
export { createAdminKey } from './store/metadata/admin-key.js';
export { verifyShellbaseSignature, e2bSignature } from './events/index.js';
