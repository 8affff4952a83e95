/** The plugin's name, apart from the plugin: `sigil tee seal`'s help names it without loading the TPM's code. */
export const VTPM_PLUGIN_NAME = 'tee-vtpm';
