"""Image geometry and fused decoding without torch: crop rules and their seeded draws (`crops`), one image's
decode-crop-resize into its batch row (`fused`), Pillow's decode with corgi's pixel bound (`pillow`), and the
header reader and pixel limit that `corgi pack` and the loaders share (`header`)."""
