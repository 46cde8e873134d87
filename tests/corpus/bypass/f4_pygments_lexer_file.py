# rule: code_string
# marker: pwned_f4_lexer_file
# Family 4: pygments runs a lexer file of any name as Python code.
from pathlib import Path
from pygments.lexers import load_lexer_from_file

Path("lexer.txt").write_text(
    "__import__('os').system('echo ran > pwned_f4_lexer_file')\nclass CustomLexer: pass\n"
)
load_lexer_from_file("lexer.txt")
