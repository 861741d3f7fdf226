import { LabIcon } from '@jupyterlab/ui-components';

/** A chip: the sidebar tab's icon. `jp-icon3` makes it follow the theme. */
const CHIP_SVG = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M9 1h2v3H9zM13 1h2v3h-2zM9 20h2v3H9zM13 20h2v3h-2zM1 9h3v2H1zM1 13h3v2H1zM20 9h3v2h-3zM20 13h3v2h-3z"/>
    <path fill-rule="evenodd" d="M6 4h12a2 2 0 0 1 2 2v12a2 2 0 0 1-2 2H6a2 2 0 0 1-2-2V6a2 2 0 0 1 2-2zm0 2v12h12V6zm3 3h6v6H9z"/>
  </g>
</svg>`;

export const chipIcon = new LabIcon({ name: 'torchdevice-magic:chip', svgstr: CHIP_SVG });
