# expect: rent: 120.00 (48.0%); food: 80.00 (32.0%)
template = "{name}: {value:.2f} ({share:.1%})"
total = 250.0
parts = []
for name, value in [("rent", 120.0), ("food", 80.0)]:
    parts.append(template.format(name=name, value=value, share=value / total))
print("; ".join(parts))
