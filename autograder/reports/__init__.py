"""What an instructor reads after grading: the CSV files (`export`), one feedback page per student
and assignment (`feedback`), the class page and its JSON (`class_page`, `class_summary`, `plots`),
and the similarity of answers (`similarity`, `canonical`).

It may import every stage below it: `course`, `isolation`, `handins`, `grading`, `release`.
"""
